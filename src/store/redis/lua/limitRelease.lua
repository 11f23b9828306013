-- Includes: prelude
-- Takes back `k` requests that limit.lua counted in a subject's layers: on Redis Cluster the
-- layers of different subjects (a client address's IP layer, the user's) are counted in calls of
-- their own, and a request that a later call refuses must leave no trace in the earlier ones.
-- KEYS[1]  the subject's record hash; KEYS[2…] each layer's sliding-log list (as for limit.lua)
-- ARGV[1]  the time the requests were counted, µs (the answer's now)
-- ARGV[2]  k, how many requests were counted
-- ARGV[3…] per layer: its rule and its category
-- Reply    1
local at, k = tonum(ARGV[1]), tonum(ARGV[2])
local first = 2
for a = 3, #ARGV, 2 do
  local algo = byte(ARGV[a], 1) - 48
  if algo == ALGO_SLIDING_LOG then
    -- the entries it pushed: the last ones with that time
    call('LREM', KEYS[first], -k, int(at))
  else
    local field = 'r:' .. ARGV[a + 1]
    local state = call('HGET', KEYS[1], field)
    if state then
      local kind = sub(state, 1, 1)
      local size = kind == 'G' and 24 or 32
      local parts = {kind}
      for pos = 2, #state - size + 1, size do
        if kind == 'C' then
          local w, b, c, p = sunpack('<dddd', state, pos)
          local cb = at - at % w
          if b == cb then
            c = max(0, c - k)
          elseif b == cb + w then
            p = max(0, p - k)
          end
          parts[#parts + 1] = spack('<dddd', w, b, c, p)
        elseif kind == 'Q' then
          local w, t, debt, n = sunpack('<dddd', state, pos)
          parts[#parts + 1] = spack('<dddd', w, t, max(0, debt - k * w / n), n)
        else
          parts[#parts + 1] = sub(state, pos, pos + size - 1)
        end
      end
      call('HSET', KEYS[1], field, concat(parts))
    end
  end
  first = first + 1
end
return 1
