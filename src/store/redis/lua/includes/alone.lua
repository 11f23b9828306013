-- A fixed layer of limit.lua decided and counted on its own: in mode each (Envoy's rate limit
-- service), or as a call's only layer. Defined once per library, not per call: a function made in
-- the script's body is a closure made on every call (callgrind: 5k Redis instructions more for one
-- descriptor). Needs prelude.lua, window.lua, layer.lua and single.lua. KEYS and ARGV are
-- limit.lua's (see it for their layout); layer i's are KEYS[2i-1], KEYS[2i] and ARGV[3i-1..3i+1].

-- A fixed layer counted on its own: the general path's evaluate and commit for one layer, as in
-- mode each (or for the only layer). Returns its windows for the reply (see pack_layer).
local function alone(KEYS, ARGV, i, k, now, dry, each)
  local a = 3 * i - 1
  local layer = layer_of(ARGV[a])
  local record, key, field = KEYS[2 * i - 1], KEYS[2 * i], ARGV[a + 1]
  layer.record, layer.key, layer.field = record, key, field
  local state
  if layer.algo ~= ALGO_SLIDING_LOG then
    local v = call('HMGET', record, 'x', field)
    layer.deadline, state = v[1] and v[1] + 0, v[2] or nil
  end
  evaluate(layer, key, k, state, now, dry, record, field)
  local counted = k > 0 and (layer.room or (each and layer.algo == ALGO_FIXED_WINDOW))
  if counted and not dry then
    commit(layer, k, now, record, field)
    if byte(ARGV[a + 2], 1) - 48 >= LAYER_EXPIRING and layer.expires_us then
      extend_record(record, layer.deadline or nil, layer.expires_us, layer[10 * layer.n - 8], now)
    end
  end
  return pack_layer(layer, counted)
end

-- Fixed layer i of one window straight through (see single.lua): its used, reset and retry for the
-- reply; nil, having written nothing, when its rule or state is not the plain one.
local function straight(KEYS, ARGV, i, k, now, dry, each)
  local a = 3 * i - 1
  local algo, n, w = one_window(ARGV[a])
  if not algo then
    return nil
  end
  local record, field = KEYS[2 * i - 1], ARGV[a + 1]
  local deadline, state
  if algo ~= ALGO_SLIDING_LOG then
    local v = call('HMGET', record, 'x', field)
    -- + 0, not tonumber: one strtod instead of two
    deadline, state = v[1] and v[1] + 0, v[2] or nil
  end
  local room, used, reset, retry, until_us = single(algo, n, w, k, KEYS[2 * i], record, field, state, now, dry, each)
  if room == nil then
    return nil
  end
  local counted = room or (each and algo == ALGO_FIXED_WINDOW)
  if counted and k > 0 and not dry and until_us and byte(ARGV[a + 2], 1) - 48 >= LAYER_EXPIRING then
    extend_record(record, deadline, until_us, w, now)
  end
  return used, reset, retry
end
