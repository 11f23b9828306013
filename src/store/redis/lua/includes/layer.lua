-- A layer: one subject's category under one rule of one or more windows, evaluated, counted, and
-- answered. Needs prelude.lua, window.lua and evidence.lua.
--
-- A rule arrives as text (src/store/redis/codec.ts): the algorithm's code (ALGO_*), then per window
-- "<limit>/<length µs>", comma-separated, e.g. "110/60000000,1000/3600000000". A layer table:
-- `algo`, `n` windows, `room`; per window i, from b = 10(i-1): [b+1] limit, [b+2] length, then the
-- outcome: [b+3] used, [b+4] remaining, [b+5] reset as it stands; [b+6], [b+7], [b+8] the same with
-- the request counted; [b+9] when it would be allowed (0: room).

local function layer_of(spec, algo)
  -- Sized once: ten array slots (a window's numbers) and every field a layer gets.
  local layer = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, algo = algo or byte(spec, 1) - 48, n = 0, room = true,
    record = false, key = false, field = false, longest = 1, seeded = false, counted = false,
    shadow = false, expiring = false, deadline = false, next_state = false, expires_us = false,
    list = false}
  -- Parsed with plain finds (no pattern matching): "<algo>:" then "<limit>/<µs>" per window.
  local pos, b = (find(spec, ':', 1, true) or 0) + 1, 0
  while true do
    local slash = find(spec, '/', pos, true)
    if not slash then
      return layer
    end
    local comma = find(spec, ',', slash, true)
    layer[b + 1], layer[b + 2] = tonum(sub(spec, pos, slash - 1)), tonum(sub(spec, slash + 1, comma and comma - 1))
    layer.n = layer.n + 1
    if not comma then
      return layer
    end
    pos, b = comma + 1, b + 10
  end
end

-- Writes window i's outcome into the layer (fixed arguments: no table per call).
local function put(layer, i, room, used, rem, reset, used_after, rem_after, reset_after, retry)
  local b = 10 * i - 8
  layer[b + 1], layer[b + 2], layer[b + 3], layer[b + 4] = used, rem, reset, used_after
  layer[b + 5], layer[b + 6], layer[b + 7] = rem_after, reset_after, retry
  if not room then
    layer.room = false
  end
end

-- Sliding log: the layer's windows share one list, cut at the longest window; each window counts
-- the entries inside its own span, so a window's count is what it is whatever windows came and
-- went before it (a reload, an override, a new order).
local function evaluate_log(layer, key, k, now, dry, record, field)
  local longest = 1
  for i = 2, layer.n do
    if layer[10 * i - 8] > layer[10 * longest - 8] then
      longest = i
    end
  end
  layer.key, layer.longest = key, longest
  local head = call('LINDEX', key, '0')
  if not head then
    -- No list: empty, or seeded from the counter's or gcra's state the record holds (all at now).
    -- Taken over even when it shows nothing now: the first count drops the record's state, as
    -- src/ratelimit/algorithms.ts's evaluateLog does, or a stale entry of it would outlive the list
    -- and be read back as a window's own by the next counter or gcra rule, blind to the list.
    local seeded = 0
    if call('HEXISTS', record, field) == 1 then
      seeded = log_seed(layer, now, record, field) or 0
      layer.seeded = seeded
    end
    for i = 1, layer.n do
      local n, w = layer[10 * i - 9], layer[10 * i - 8]
      local reset = seeded == 0 and now or now + w
      if seeded + k <= n then
        put(layer, i, true, seeded, n - seeded, reset, seeded + k, n - seeded - k, k > 0 and now + w or reset, 0)
      else
        put(layer, i, false, seeded, max(0, n - seeded), reset, seeded + k, 0, now + w, now + w)
      end
    end
    return
  end
  put(layer, longest, log_window(key, layer[10 * longest - 9], layer[10 * longest - 8], k, now, dry, false,
    head + 0))
  for i = 1, layer.n do
    if i ~= longest then
      put(layer, i, log_window(key, layer[10 * i - 9], layer[10 * i - 8], k, now, dry, true))
    end
  end
end

-- Counter or gcra: `state` is the record field's value. A window with no entry of its own starts
-- from what the others and a sliding log's list show (counter: in its fixed window; gcra: that much
-- in debt); the first count drops the list.
local function evaluate_record(layer, key, k, state, now)
  local found, kept, latest, all = entries(layer, state, now)
  local fixed = layer.algo == ALGO_FIXED_WINDOW
  local counter = fixed or layer.algo == ALGO_SLIDING_COUNTER
  local parts, expires = {counter and 'C' or 'Q'}, latest
  for i = 1, layer.n do
    local n, w, s = layer[10 * i - 9], layer[10 * i - 8], found[i]
    if not s then
      local seen = max(evidence(all, n, w, now), (log_recent(key, w, now)))
      layer.list = key
      if fixed then
        s = {now - now % w, max(0, ceil(seen - EPS)), 0}
      elseif counter then
        s = {now - now % w, seen, 0}
      else
        s = {now, min(seen, n) * (w / n), n}
      end
    end
    local room, used, rem, reset, used_after, rem_after, reset_after, retry, packed, until_us
    if fixed then
      room, used, rem, reset, used_after, rem_after, reset_after, retry, packed, until_us =
        fixed_window(n, w, k, s[1], s[2], s[3], now)
    elseif counter then
      room, used, rem, reset, used_after, rem_after, reset_after, retry, packed, until_us =
        counter_window(n, w, k, s[1], s[2], s[3], now)
    else
      room, used, rem, reset, used_after, rem_after, reset_after, retry, packed, until_us =
        gcra_window(n, w, k, s[1], s[2], s[3], now)
    end
    put(layer, i, room, used, rem, reset, used_after, rem_after, reset_after, retry)
    parts[#parts + 1] = packed
    expires = max(expires, until_us)
  end
  parts[#parts + 1] = kept
  layer.next_state, layer.expires_us = concat(parts), expires
end

-- Evaluates a layer for `k` more requests: its sliding-log list `key`, or `state`, the value of
-- field `field` of the subject's record hash `record`.
local function evaluate(layer, key, k, state, now, dry, record, field)
  if layer.algo == ALGO_SLIDING_LOG then
    evaluate_log(layer, key, k, now, dry, record, field)
  else
    evaluate_record(layer, key, k, state, now)
  end
end

-- A sliding-log list must outlive its newest entry by a window. A push reads the list's TTL (a read
-- costs Redis less than a write) and moves it only when it falls short, then to a little past a
-- window (a hundredth of it, at most 1 s), so that a busy list's expiry is written once per that
-- slack instead of on every request. Nothing shortens an expiry: every push to a list comes here.
-- With Redis's clock the expiry is set as an absolute time and the library remembers it (memo,
-- under the list's key), so that the pushes within the slack need not read the TTL: sound because
-- every push to a list runs here, an expiry only moves later, and a list deleted since (trimmed
-- empty, reset, evicted) is made anew by a push that finds it new (`created`), which sets its
-- expiry afresh. A test's pinned clock is not the one expiries run on: then nothing is remembered.
local function extend_log(key, w, now, created)
  local seen = memo[key] or recall(key)
  if seen and not created and real_clock and now + w <= (seen < 0 and -seen or seen) then
    return
  end
  local whole = ceil(w / 1000)
  if not created and call('PTTL', key) >= whole then
    return
  end
  local ms = whole + min(1000, ceil(whole / 100))
  if not real_clock then
    call('PEXPIRE', key, int(ms))
    return
  end
  local at = floor(now / 1000) + ms
  call('PEXPIREAT', key, int(at))
  if seen then
    memo[key] = seen > 0 and at * 1000 or -at * 1000
  else
    remember(key, -at * 1000)
  end
end

-- Records in a list's memo, when there is one, whether its last count left room (its sign).
local function log_room(key, room)
  local at = memo[key] or recall(key)
  if at then
    if at < 0 then
      at = -at
    end
    memo[key] = room and at or -at
  end
end

-- Counts `k` requests in a layer that had room for them.
local function commit(layer, k, now, record, field)
  if layer.algo == ALGO_SLIDING_LOG then
    local count = k + (layer.seeded or 0)
    if count == 0 then
      return
    end
    local length
    if count == 1 then
      length = call('RPUSH', layer.key, int(now))
    else
      local stamp, stamps = int(now), {}
      for i = 1, count do
        stamps[i] = stamp
      end
      length = call('RPUSH', layer.key, unpack(stamps))
    end
    extend_log(layer.key, layer[10 * layer.longest - 8], now, length == count)
    if layer.seeded then
      call('HDEL', record, field)
    end
  else
    call('HSET', record, field, layer.next_state)
    if layer.list then
      call('DEL', layer.list)
    end
  end
end

-- A record hash of a subject other than a user expires once none of its states matter: `deadline`
-- is its current expiry (field x, ms of the script's clock), moved a window past what is needed so
-- that it moves rarely. The expiry is set relative to now, so a pinned test clock works too.
local function extend_record(record, deadline, needed_us, slack_us, now)
  local needed = ceil(needed_us / 1000)
  if not deadline or needed > deadline then
    local at = needed + ceil(slack_us / 1000)
    call('HSET', record, 'x', int(at))
    call('PEXPIRE', record, int(at - floor(now / 1000)))
  end
end

-- A layer's windows for the reply: per window three doubles, used, reset (µs) and when the
-- request would be allowed (µs; 0: room), as it stands, or with the request counted when `counted`.
local function pack_layer(layer, counted)
  if layer.n == 1 then
    if counted then
      -- A refused hit counted (a fixed window in mode each) keeps its wait.
      return spack('<ddd', layer[6], layer[8], layer.room and 0 or layer[9])
    end
    return spack('<ddd', layer[3], layer[5], layer[9])
  end
  local parts = {}
  for i = 1, layer.n do
    local b = 10 * i - 10
    if counted then
      parts[i] = spack('<ddd', layer[b + 6], layer[b + 8], layer.room and 0 or layer[b + 9])
    else
      parts[i] = spack('<ddd', layer[b + 3], layer[b + 5], layer[b + 9])
    end
  end
  return concat(parts)
end

-- Whether the request counts in every layer (all-or-none): each has room, or is in shadow mode.
local function counts_all(layers)
  for i = 1, #layers do
    if not layers[i].room and not layers[i].shadow then
      return false
    end
  end
  return true
end

-- The reply: four doubles (a STATUS_*, now µs, the session's expiry ms, the length of the text at
-- the end), every layer's windows (see pack_layer) with the request counted where `counted`, then
-- the text. A single window packs in one call.
local function pack_reply(status, now, exp, text, layers, counted)
  if #layers == 1 and layers[1].n == 1 then
    local l = layers[1]
    if counted and l.counted then
      return spack('<dddddddc0', status, now, exp, #text, l[6], l[8], l.room and 0 or l[9], text)
    end
    return spack('<dddddddc0', status, now, exp, #text, l[3], l[5], l[9], text)
  end
  local parts = {spack('<dddd', status, now, exp, #text)}
  for i = 1, #layers do
    parts[i + 1] = pack_layer(layers[i], counted and layers[i].counted)
  end
  parts[#parts + 1] = text
  return concat(parts)
end
