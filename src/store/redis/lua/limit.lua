-- Counts a request in a subject's layers (a client address's IP layer and category, a username's
-- failed logins, …) when every window of every layer has room, and in none otherwise, atomically.
-- A full shadow layer refuses nothing: the request counts in the layers with room when every
-- enforced one has room.
-- KEYS[1]  the subject's record hash: counter and gcra states in fields r:<category> (a user's
--          record is the user hash; any other subject's expires, its deadline in field x)
-- KEYS[2…] each layer's sliding-log list, one per layer (every window of a log layer counts in it;
--          a counter or gcra layer reads it only when a change of algorithm left one)
-- ARGV[1]  "now" in µs when a test pins the clock; "" for Redis TIME
-- ARGV[2]  "1" count the request, "3" count it and expect room (see log_push), "0" decide only,
--          "2" decide only and add every window's state
-- ARGV[3]  "1" when the record expires (any subject but a user)
-- ARGV[4]  the shadow layers: a digit per layer, "1" for one in shadow mode ("" when none is)
-- ARGV[5…] per layer: its rule (see rule_of_tier) and its category
-- Reply    the answer (see pack_answer); with ARGV[2] "2", then per layer and window five doubles:
--          limit, window µs, used, remaining, reset µs. For one layer of one window and any other
--          mode, the usual answer (see pack_usual).
local now = clock_us(ARGV[1])
local mode = ARGV[2]
local dry = mode ~= '1' and mode ~= '3'
local expiring = ARGV[3] == '1'
if #ARGV == 6 and mode ~= '2' then
  -- The usual request: one layer of one window, decided straight through (a layer alone counts
  -- only when it has room, shadow or not).
  local spec = ARGV[5]
  local algo, n = byte(spec, 1) - 48, byte(spec, 2) - 48
  if n == 1 then
    local field = 'r:' .. ARGV[6]
    local state, deadline
    if algo ~= 1 then
      local v = call('HMGET', KEYS[1], 'x', field)
      deadline, state = tonum(v[1]), v[2] or nil
    end
    local reply, usual, room, expires, w = single(spec, 1, KEYS[2], KEYS[1], field, state, now, dry, mode == '3')
    if usual then
      if room and not dry and expires and expiring then
        extend_record(KEYS[1], deadline, expires, w, now)
      end
      return reply
    end
  end
end
local G = general()
local layers = {}
local fields = {'x'}
local shadows = ARGV[4]
for a = 5, #ARGV, 2 do
  local layer = G.layer_at(ARGV[a], 1)
  layer.field = 'r:' .. ARGV[a + 1]
  layer.shadow = byte(shadows, #layers + 1) == 49
  layers[#layers + 1] = layer
  if layer.algo ~= 1 then
    fields[#fields + 1] = layer.field
  end
end
local states = {}
local deadline
if #fields > 1 then
  local values = call('HMGET', KEYS[1], unpack(fields))
  for f = 2, #fields do
    states[fields[f]] = values[f] or nil
  end
  deadline = tonum(values[1])
end
local first = 2
local allowed = true
for l = 1, #layers do
  local layer = layers[l]
  G.evaluate(layer, KEYS, first, states[layer.field], now, dry, KEYS[1], layer.field)
  first = first + 1
  allowed = allowed and layer.room
end
if (allowed or G.counts(layers)) and not dry then
  local needed, slack = 0, 0
  for l = 1, #layers do
    local layer = layers[l]
    if layer.room then
      G.commit(layer, now, KEYS[1], layer.field)
      if layer.expires_us then
        needed = max(needed, layer.expires_us)
        slack = max(slack, layer[10 * layer.n - 8])
      end
    end
  end
  if needed > 0 and expiring then
    extend_record(KEYS[1], deadline, needed, slack, now)
  end
end
local reply = G.answer(layers, allowed, now)
if mode == '2' then
  local parts = {reply}
  for l = 1, #layers do
    local layer = layers[l]
    for i = 1, layer.n do
      local b = 10 * i - 10
      parts[#parts + 1] = spack('<ddddd', layer[b + 1], layer[b + 2], layer[b + 3], layer[b + 4], layer[b + 5])
    end
  end
  reply = concat(parts)
end
return reply
