-- Takes back a request that limit.lua counted in a subject's layers: on Redis Cluster the IP layer
-- is counted in its own call before the user's, and a request the user's layer then refuses must
-- leave no trace there either.
-- KEYS[1]  the subject's record hash; KEYS[2…] each layer's sliding-log list (as for limit.lua)
-- ARGV[1]  the time the request was counted, µs (the answer's now)
-- ARGV[2…] per layer: its rule and its category
-- Reply    1
local at = tonum(ARGV[1])
local G = general()
local first = 2
for a = 2, #ARGV, 2 do
  local rule = G.layer_at(ARGV[a], 1)
  if rule.algo == 1 then
    -- the entry it pushed: the last one with that time
    call('LREM', KEYS[first], -1, int(at))
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
            c = max(0, c - 1)
          elseif b == cb + w then
            p = max(0, p - 1)
          end
          parts[#parts + 1] = spack('<dddd', w, b, c, p)
        elseif kind == 'Q' then
          local w, t, debt, n = sunpack('<dddd', state, pos)
          debt = max(0, debt - w / n)
          parts[#parts + 1] = spack('<dddd', w, t, debt, n)
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
