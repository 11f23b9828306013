-- Includes: prelude window evidence layer single alone session profile
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
--          the user's list of the category; for a subject without a session (an API key, a
--          provider subject): its profile hash twice, its record hash and its list of the category
-- ARGV[1]  the mode: one digit, flags added together: FLAG_DRY_RUN (decide without counting or
--          renewing anything), FLAG_EACH (count in each layer with room; otherwise in every layer
--          or in none), FLAG_IDENTITY (the last four KEYS, and two ARGV after the fixed layers', are
--          the identity's); then, when the request counts as other than one, ":" and k, how many
--          it counts as (0: only look). E.g. "4" a user's check, "1:0" a look.
-- then     per fixed layer: its rule (see layer.lua), its record field ("r:<category>"), and a
--          digit: LAYER_SHADOW (in shadow mode) and LAYER_EXPIRING (its record expires) added together
-- then     with an identity: the session's idle lifetime (ms), or a profile's proof (see
--          profile.lua: a letter first), and the user's layer: its record
--          field ("r:<category>") followed by the category's rule per tier, ";<tier>=<rule>" per
--          tier (see tier_table). The session id is read from the session's key.
-- last     "now" in µs when a test pins the clock, after every other argument; absent: Redis TIME
-- Why so few arguments: each costs Redis about 1k instructions, and a string made a number costs a
-- strtod or two (tonumber parses twice, arithmetic once: about 0.5k each). A user's usual check sends
-- three, its mode read with byte() (callgrind, 2026-12-05, per allowed check: 78.2k with a now,
-- flags and k of their own, parsed with tonumber, a session id and a record field; 75.3k with the
-- mode; 73.1k with the session id and field gone, against 74.0k for the build before the redesign).
-- Reply    four doubles: a STATUS_*, now (µs), the session's absolute expiry (ms; 0 without an
--          identity) and the length of the text at the end; then per layer, per window, three
--          doubles (see pack_layer), with the request counted in the layers that count it; then the
--          text: with an identity "<tier>" or "<tier>\n<own windows>", with a profile
--          "<tier>\n<own windows or nothing>\n<user or nothing>" (STATUS_UNKNOWN_TIER: the tier). STATUS_NO_SESSION and
--          STATUS_USER_INACTIVE carry no layers; STATUS_REFUSED_BEFORE_IDENTITY (an enforced fixed
--          layer is full: the session was not looked at) only the fixed layers.
local mode = ARGV[1]
local flags = byte(mode, 1) - 48
local dry = flags % 2 == FLAG_DRY_RUN
local each = flags % (2 * FLAG_EACH) >= FLAG_EACH
local identity = flags >= FLAG_IDENTITY
local k = #mode == 1 and 1 or sub(mode, 3) + 0
-- The fixed layers are the pairs of KEYS before the identity's four; their arguments come after
-- the mode, three each, then the identity's two (at `at`), then a pinned clock's now.
local fixed = (#KEYS - (identity and 4 or 0)) / 2
local at = 2 + 3 * fixed
local now = clock_us(ARGV[at + (identity and 2 or 0)])

-- The usual call of one fixed layer of one window (an address's category, a username's failures).
if fixed == 1 and not identity then
  local used, reset, retry = straight(KEYS, ARGV, 1, k, now, dry, each)
  if used then
    return spack('<dddddddc0', STATUS_OK, now, 0, 0, used, reset, retry, '')
  end
end

-- Mode each without an identity (Envoy's rate limit service): every layer is decided and counted
-- on its own, so each goes straight through when it can. Layers one after the other see each
-- other's counts, as the reference's INCRBYs do. Redis instructions per call of three descriptors
-- (bench/rls-callgrind.mjs, 2026-12-05), general path → here: sliding log 293k → 186k, sliding
-- counter 294k → 167k, gcra 282k → 156k.
if each and fixed > 1 and not identity then
  local parts = {spack('<dddd', STATUS_OK, now, 0, 0)}
  for i = 1, fixed do
    local used, reset, retry = straight(KEYS, ARGV, i, k, now, dry, each)
    parts[i + 1] = used and spack('<ddd', used, reset, retry) or alone(KEYS, ARGV, i, k, now, dry)
  end
  return concat(parts)
end

local layers = {}
for i = 1, fixed do
  layers[i] = fixed_layer(KEYS, ARGV, i, k, now, dry)
end

local exp, tail = 0, ''
if identity then
  if not each and not counts_all(layers) then
    return pack_reply(STATUS_REFUSED_BEFORE_IDENTITY, now, 0, '', layers, false)
  end
  local base = 2 * fixed
  local tiers = tier_table(ARGV[at + 1])
  local field = tiers[1]
  local proof = ARGV[at]
  local kind = byte(proof, 1)
  -- A session's proof is its idle lifetime (digits); any other is a profile's (see profile.lua).
  local profile = kind < 48 or kind > 57
  -- A provider subject's record expires as an address's does: nothing stays of one that stops coming.
  local expiring = kind == PROOF_SUBJECT
  local status, tier, own, uid
  if profile then
    status, tier, own, uid = profile_touch(KEYS[base + 1], proof, field, floor(now / 1000), dry)
  else
    status, tier, own, exp = session_touch(KEYS[base + 1], KEYS[base + 2], nil, proof,
      floor(now / 1000), dry, field)
  end
  if status ~= SESSION_VALID then
    return spack('<dddd', status == SESSION_GONE and STATUS_NO_SESSION or STATUS_USER_INACTIVE, now, 0, 0)
  end
  local spec = rule_of_tier(tiers, ARGV[at + 1], tier)
  if not spec and not own then
    return spack('<ddddc0', STATUS_UNKNOWN_TIER, now, 0, #tier, tier)
  end
  if profile then
    tail = tier .. '\n' .. (own or '') .. '\n' .. (uid or '')
  else
    tail = own and tier .. '\n' .. own or tier
  end
  -- The usual check: the tier's rule of one window, no fixed layer.
  if fixed == 0 and not own then
    local algo, n, w = one_window(spec)
    -- An expiring record's state (a provider subject's counter or gcra) takes the general path,
    -- which moves the record's expiry; a sliding log writes no record.
    if expiring and algo ~= ALGO_SLIDING_LOG then
      algo = nil
    end
    local state
    if algo and algo ~= ALGO_SLIDING_LOG then
      state = call('HGET', KEYS[3], field) or nil
    end
    local room, used, reset, retry = nil, 0, 0, 0
    if algo then
      room, used, reset, retry = single(algo, n, w, k, KEYS[4], KEYS[3], field, state, now, dry)
    end
    if room ~= nil then
      return spack('<dddddddc0', STATUS_OK, now, exp, #tail, used, reset, retry, tail)
    end
  end
  -- The user's own windows are counted with the tier's algorithm for the category.
  local mine = own and layer_of(own, spec and byte(spec, 1) - 48 or ALGO_SLIDING_LOG) or layer_of(spec)
  mine.record, mine.key, mine.field = KEYS[base + 3], KEYS[base + 4], field
  mine.expiring = expiring
  local state
  if mine.algo ~= ALGO_SLIDING_LOG then
    if expiring then
      local v = call('HMGET', mine.record, 'x', mine.field)
      mine.deadline, state = v[1] and v[1] + 0, v[2] or nil
    else
      state = call('HGET', mine.record, mine.field) or nil
    end
  end
  evaluate(mine, mine.key, k, state, now, dry, mine.record, mine.field)
  layers[#layers + 1] = mine
end

-- The layers that count the request (or would, on a dry run) report their windows with it counted.
local counting = k > 0 and (each or counts_all(layers))
local needed
for i = 1, #layers do
  local layer = layers[i]
  -- In mode each a fixed window counts a refused hit too, as envoyproxy/ratelimit's INCRBY does.
  layer.counted = counting and (layer.room or (each and layer.algo == ALGO_FIXED_WINDOW))
  if layer.counted and not dry then
    commit(layer, k, now, layer.record, layer.field)
    -- Records that expire: until the latest time a state written into them matters.
    if layer.expiring and layer.expires_us then
      local r = layer.record
      needed = needed or {}
      local e = needed[r] or {0, 0, layer.deadline}
      e[1], e[2] = max(e[1], layer.expires_us), max(e[2], layer[10 * layer.n - 8])
      needed[r] = e
    end
  end
end
if needed then
  for r, e in pairs(needed) do
    extend_record(r, e[3] or nil, e[1], e[2], now)
  end
end
return pack_reply(STATUS_OK, now, exp, tail, layers, true)
