-- Counts a request in a subject's layers (a client address's IP layer and category, a username's
-- failed logins, …) when every window of every layer has room, and in none otherwise, atomically.
-- KEYS[1]  the subject's record hash: counter and gcra states in fields r:<category> (a user's
--          record is the user hash; any other subject's expires, its deadline in field x)
-- KEYS[2…] the sliding-log layers' lists, one per window, layer after layer
-- ARGV[1]  "now" in µs when a test pins the clock; "" for Redis TIME
-- ARGV[2]  "1" count the request, "0" decide only, "2" decide only and add every window's state
-- ARGV[3]  "1" when the record expires (any subject but a user)
-- ARGV[4…] per layer: its rule (see parse_rule) and its category
-- Reply    {allowed (1|0), layer, window, limit, used, remaining, window_us, reset_us, retry_us, now_us}
--          describing one window (see describe); with ARGV[2] "2", then per layer and window:
--          limit, window_us, used, remaining, reset_us
local now = clock_us(ARGV[1])
local mode = ARGV[2]
local dry = mode ~= '1'
local layers = {}
local fields = {'x'}
for a = 4, #ARGV, 2 do
  local layer = new_layer(parse_rule(ARGV[a], 1))
  layer.field = 'r:' .. ARGV[a + 1]
  layers[#layers + 1] = layer
  if layer.rule.algo ~= 'L' then
    fields[#fields + 1] = layer.field
  end
end
local stored = {}
if #fields > 1 then
  local values = redis.call('HMGET', KEYS[1], unpack(fields))
  for f = 2, #fields do
    stored[fields[f]] = values[f] or nil
  end
  stored.x = tonumber(values[1])
end
local first = 2
local allowed = true
for l = 1, #layers do
  local layer = layers[l]
  eval_layer(layer, first, stored[layer.field], now, dry)
  if layer.rule.algo == 'L' then
    first = first + #layer.rule.lim
  end
  allowed = allowed and layer.room
end
if allowed and not dry then
  local needed, slack = 0, 0
  for l = 1, #layers do
    local layer = layers[l]
    commit_layer(layer, now, KEYS[1], layer.field)
    if layer.expires_us then
      needed = math.max(needed, layer.expires_us)
      slack = math.max(slack, layer.rule.win[#layer.rule.win])
    end
  end
  if needed > 0 and ARGV[3] == '1' then
    extend_record(KEYS[1], stored.x, needed, slack, now)
  end
end
local reply = answer(layers, allowed, now)
if mode == '2' then
  for l = 1, #layers do
    local layer = layers[l]
    for i = 1, #layer.rule.lim do
      local n = #reply
      reply[n + 1] = layer.rule.lim[i]
      reply[n + 2] = layer.rule.win[i]
      reply[n + 3] = layer.used_now[i]
      reply[n + 4] = layer.rem_now[i]
      reply[n + 5] = layer.reset_now[i]
    end
  end
end
return reply
