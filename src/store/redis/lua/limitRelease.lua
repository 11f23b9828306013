-- Takes back a request that limit.lua counted in a subject's layers: on Redis Cluster the IP layer
-- is counted in its own call before the user's, and a request the user's layer then refuses must
-- leave no trace there either.
-- KEYS[1]  the subject's record hash; KEYS[2…] the sliding-log layers' lists (as for limit.lua)
-- ARGV[1]  the time the request was counted, µs (the answer's now)
-- ARGV[2…] per layer: its rule and its category
-- Reply    1
local at = tonumber(ARGV[1])
local G = general()
local first = 2
for a = 2, #ARGV, 2 do
  local rule = G.layer_at(ARGV[a], 1)
  if rule.algo == 1 then
    for i = 1, rule.n do
      -- the entry it pushed: the last one with that time
      redis.call('LREM', KEYS[first + i - 1], -1, int(at))
    end
    first = first + rule.n
  else
    local field = 'r:' .. ARGV[a + 1]
    local state = redis.call('HGET', KEYS[1], field)
    if state then
      local size = rule.algo == 2 and 32 or 24
      local parts = {string.sub(state, 1, 1)}
      for pos = 2, #state - size + 1, size do
        if size == 32 then
          local w, b, c, p = struct.unpack('<dddd', state, pos)
          local cb = at - at % w
          if b == cb then
            c = math.max(0, c - 1)
          elseif b == cb + w then
            p = math.max(0, p - 1)
          end
          parts[#parts + 1] = struct.pack('<dddd', w, b, c, p)
        else
          local w, t, debt = struct.unpack('<ddd', state, pos)
          for i = 1, rule.n do
            if rule[10 * i - 8] == w then
              debt = math.max(0, debt - w / rule[10 * i - 9])
            end
          end
          parts[#parts + 1] = struct.pack('<ddd', w, t, debt)
        end
      end
      redis.call('HSET', KEYS[1], field, table.concat(parts))
    end
  end
end
return 1
