-- Includes: prelude window layer session
-- Counts `k` requests in a request's layers, atomically, and answers every window of every layer.
-- A layer is a subject's category under a rule. The fixed layers come with the call (a client
-- address's IP layer, an anonymous category, a username's failed logins, a descriptor); with an
-- identity, the user's layer comes last, its rule read in the same call from the session: the
-- user's own windows for the category, or the tier's rule. ALL_OR_NONE counts the request in every
-- layer or in none (a full shadow layer refuses nothing: then the layers with room count it);
-- EACH counts it in every layer that has room, independently (Envoy's rate limit service).
-- KEYS     per fixed layer: its subject's record hash (counter and gcra states in fields
--          r:<category>; a user's record is the user hash; any other subject's expires, its
--          deadline in field x), then its sliding-log list (a log counts in it; a counter or gcra
--          reads it when a change of algorithm left one);
--          then, with an identity: the session hash, the user's session index, the user hash and
--          the user's list of the category
-- ARGV[1]  "now" in µs when a test pins the clock; "" for Redis TIME
-- ARGV[2]  HOW_COUNT, or HOW_DRY_RUN (decide without counting or renewing anything)
-- ARGV[3]  MODE_ALL_OR_NONE or MODE_EACH
-- ARGV[4]  k, how many requests this one counts as (0: only look)
-- ARGV[5]  how many fixed layers
-- then     per fixed layer: its rule (see layer.lua), its category, "1" in shadow mode, "1" when
--          its record expires
-- then     with an identity: session id, session idle lifetime (ms), the user's category, and the
--          category's rule per tier: ";<tier>=<rule>" per tier
-- Reply    four doubles: a STATUS_*, now (µs), the session's absolute expiry (ms; 0 without an
--          identity) and the length of the text that follows: with an identity "<tier>\n<own
--          windows>" (STATUS_UNKNOWN_TIER: the tier); then per layer, per window, three doubles (see
--          pack_layer), with the request counted in the layers that count it. STATUS_NO_SESSION and
--          STATUS_USER_INACTIVE carry no layers; STATUS_REFUSED_BEFORE_IDENTITY (an enforced fixed
--          layer is full: the session was not looked at) only the fixed layers.
local now = clock_us(ARGV[1])
local dry = tonum(ARGV[2]) == HOW_DRY_RUN
local each = tonum(ARGV[3]) == MODE_EACH
local k = tonum(ARGV[4])
local fixed = tonum(ARGV[5])
local layers = {}
for i = 1, fixed do
  local a = 2 + 4 * i
  local layer = layer_of(ARGV[a])
  layer.record, layer.key, layer.field = KEYS[2 * i - 1], KEYS[2 * i], 'r:' .. ARGV[a + 1]
  layer.shadow, layer.expiring = ARGV[a + 2] == '1', ARGV[a + 3] == '1'
  local state
  if layer.algo ~= ALGO_SLIDING_LOG then
    local v = call('HMGET', layer.record, 'x', layer.field)
    layer.deadline, state = tonum(v[1]), v[2] or nil
  end
  evaluate(layer, layer.key, k, state, now, dry, layer.record, layer.field)
  layers[i] = layer
end

local function counts()
  for i = 1, #layers do
    if not layers[i].room and not layers[i].shadow then
      return false
    end
  end
  return true
end

-- The reply: four doubles (a STATUS_*, now µs, the session's expiry ms, the text's length), the
-- text, then every layer's windows.
local function packed(status, exp, text, counted)
  local parts = {spack('<dddd', status, now, exp, #text), text}
  for i = 1, #layers do
    parts[i + 2] = pack_layer(layers[i], counted and layers[i].counted)
  end
  return concat(parts)
end

local at = 6 + 4 * fixed
local exp, tail = 0, ''
if ARGV[at] then
  if not each and not counts() then
    return packed(STATUS_REFUSED_BEFORE_IDENTITY, 0, '', false)
  end
  local base = 2 * fixed
  local category = ARGV[at + 2]
  local status, tier, own
  status, tier, own, exp = session_touch(KEYS[base + 1], KEYS[base + 2], ARGV[at], ARGV[at + 1],
    floor(now / 1000), dry, category)
  if status ~= SESSION_VALID then
    return spack('<dddd', status == SESSION_GONE and STATUS_NO_SESSION or STATUS_USER_INACTIVE, now, 0, 0)
  end
  local tiers = ARGV[at + 3]
  local found = find(tiers, ';' .. tier .. '=', 1, true)
  local spec = found and match(tiers, '^[^;]*', found + #tier + 2)
  if not spec and not own then
    return spack('<dddd', STATUS_UNKNOWN_TIER, now, 0, #tier) .. tier
  end
  -- The user's own windows are counted with the tier's algorithm for the category.
  local mine = own and layer_of(own, spec and byte(spec, 1) - 48 or ALGO_SLIDING_LOG) or layer_of(spec)
  mine.record, mine.key, mine.field = KEYS[base + 3], KEYS[base + 4], 'r:' .. category
  local state
  if mine.algo ~= ALGO_SLIDING_LOG then
    state = call('HGET', mine.record, mine.field) or nil
  end
  evaluate(mine, mine.key, k, state, now, dry, mine.record, mine.field)
  layers[#layers + 1] = mine
  tail = tier .. '\n' .. (own or '')
end

-- The layers that count the request (or would, on a dry run) report their windows with it counted.
local counting = k > 0 and (each or counts())
local needed, slack, deadline = {}, {}, {}
for i = 1, #layers do
  local layer = layers[i]
  layer.counted = counting and layer.room
  if layer.counted and not dry then
    commit(layer, k, now, layer.record, layer.field)
    -- Records that expire: until the latest time a state written into them matters.
    if layer.expiring and layer.expires_us then
      local r = layer.record
      needed[r] = max(needed[r] or 0, layer.expires_us)
      slack[r] = max(slack[r] or 0, layer[10 * layer.n - 8])
      deadline[r] = deadline[r] or layer.deadline or false
    end
  end
end
for r, until_us in pairs(needed) do
  extend_record(r, deadline[r] or nil, until_us, slack[r], now)
end
return packed(STATUS_OK, exp, tail, true)
