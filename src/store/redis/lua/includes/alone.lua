-- limit.lua's fixed layers: built and evaluated (the general path), counted on their own in mode
-- each (Envoy's rate limit service), or straight through (a call's only layer, or each in mode
-- each). Defined once per library, not per call: a function made in the script's body is a closure
-- made on every call (callgrind: 5k Redis instructions more for one descriptor). Needs prelude.lua,
-- window.lua, layer.lua and single.lua. KEYS and ARGV are limit.lua's (see it for their layout);
-- layer i's are KEYS[2i-1], KEYS[2i] and ARGV[3i-1..3i+1].

-- Fixed layer i as the general path takes it: its table (see layer.lua), evaluated for `k` more.
local function fixed_layer(KEYS, ARGV, i, k, now, dry)
  local a = 3 * i - 1
  local layer = layer_of(ARGV[a])
  layer.record, layer.key, layer.field = KEYS[2 * i - 1], KEYS[2 * i], ARGV[a + 1]
  local kind = byte(ARGV[a + 2], 1) - 48
  layer.shadow, layer.expiring = kind % 2 == LAYER_SHADOW, kind >= LAYER_EXPIRING
  local state
  if layer.algo ~= ALGO_SLIDING_LOG then
    local v = call('HMGET', layer.record, 'x', layer.field)
    layer.deadline, state = v[1] and v[1] + 0, v[2] or nil
  end
  evaluate(layer, layer.key, k, state, now, dry, layer.record, layer.field)
  return layer
end

-- Fixed layer i counted on its own in mode each, by the general path (a rule of several windows,
-- another algorithm's state): its windows for the reply (see pack_layer).
local function alone(KEYS, ARGV, i, k, now, dry)
  local layer = fixed_layer(KEYS, ARGV, i, k, now, dry)
  -- In mode each a fixed window counts a refused hit too, as envoyproxy/ratelimit's INCRBY does.
  local counted = k > 0 and (layer.room or layer.algo == ALGO_FIXED_WINDOW)
  if counted and not dry then
    commit(layer, k, now, layer.record, layer.field)
    if layer.expiring and layer.expires_us then
      extend_record(layer.record, layer.deadline or nil, layer.expires_us, layer[10 * layer.n - 8], now)
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
