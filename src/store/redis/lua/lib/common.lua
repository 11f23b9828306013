-- Shared functions, prepended by the loader to every script in this folder. The limiter's arithmetic
-- mirrors src/ratelimit/algorithms.ts (the memory store's), which the contract tests hold both to.

-- Now in microseconds: ARGV "now" when a test pins the clock, otherwise Redis TIME (one clock for all).
local function clock_us(pinned)
  if pinned and pinned ~= '' then
    return tonumber(pinned)
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- Numbers go to Redis as %d strings: Lua's default formatting would round microsecond times.
local function int(n)
  return string.format('%d', n)
end

local EPS = 1e-9
local EPS_US = 1e-3

-- A rule is "<algorithm><limit>/<window µs>[,<limit>/<window µs>]…", windows shortest first, the
-- algorithm one letter: L sliding log, C sliding counter, G gcra. Starts at `pos` in `spec`.
local function parse_rule(spec, pos)
  local rule = {algo = string.sub(spec, pos, pos), lim = {}, win = {}}
  pos = pos + 1
  while true do
    local l, w, nxt = string.match(spec, '^(%d+)/(%d+)()', pos)
    rule.lim[#rule.lim + 1] = tonumber(l)
    rule.win[#rule.win + 1] = tonumber(w)
    if string.byte(spec, nxt) ~= 44 then
      return rule
    end
    pos = nxt + 1
  end
end

-- A layer under evaluation: its rule, per window the outcome (as it stands, and with this request
-- counted), and what counting it writes. `room` is false once any window is full.
local function new_layer(rule)
  return {rule = rule, room = true, used_now = {}, rem_now = {}, reset_now = {}, used_after = {},
    rem_after = {}, reset_after = {}, retry = {}}
end

-- Sliding log: one list of request times (µs, oldest first) per window. Counts the fresh entries
-- and, unless dry, drops the stale ones; the first fresh one is found by galloping from the head,
-- so a busy window costs one extra read. Returns count, oldest fresh entry, its index in the list.
local function log_fresh(key, w, now, dry)
  local head = tonumber(redis.call('LINDEX', key, 0))
  if not head then
    return 0, now, 0
  end
  local len = redis.call('LLEN', key)
  local cutoff = now - w
  if head > cutoff then
    return len, head, 0
  end
  local lo, hi, value = 0, 1, nil
  while true do
    if hi >= len - 1 then
      hi = len - 1
      value = tonumber(redis.call('LINDEX', key, hi))
      if value <= cutoff then
        if not dry then
          redis.call('DEL', key)
        end
        return 0, now, len
      end
      break
    end
    value = tonumber(redis.call('LINDEX', key, hi))
    if value > cutoff then
      break
    end
    lo, hi = hi, hi * 2
  end
  while hi - lo > 1 do
    local mid = math.floor((lo + hi) / 2)
    local v = tonumber(redis.call('LINDEX', key, mid))
    if v > cutoff then
      hi, value = mid, v
    else
      lo = mid
    end
  end
  if dry then
    return len - hi, value, hi
  end
  redis.call('LTRIM', key, hi, -1)
  return len - hi, value, 0
end

-- Evaluates a sliding-log layer whose lists are KEYS[first], KEYS[first + 1], …
local function eval_log(layer, first, now, dry)
  local rule = layer.rule
  layer.keys = {}
  for i = 1, #rule.lim do
    local key = KEYS[first + i - 1]
    local n, w = rule.lim[i], rule.win[i]
    local used, oldest, at = log_fresh(key, w, now, dry)
    layer.keys[i] = key
    layer.used_now[i] = used
    layer.rem_now[i] = math.max(0, n - used)
    layer.reset_now[i] = used == 0 and now or oldest + w
    layer.used_after[i] = used + 1
    layer.rem_after[i] = n - used - 1
    layer.reset_after[i] = oldest + w
    if used < n then
      layer.retry[i] = 0
    else
      layer.room = false
      -- the (used - limit)-th oldest entry's departure makes room
      local frees = used == n and oldest or tonumber(redis.call('LINDEX', key, at + used - n))
      layer.retry[i] = frees + w
    end
  end
end

-- Counter and gcra keep their state in one field of the subject's record hash: the algorithm's
-- letter, then per window length packed doubles (counter: w, fixed window start, count, previous
-- count; gcra: w, time of the last change, debt). A state of another algorithm is ignored; the
-- entries of window lengths the rule no longer has are kept while they matter (a policy reload may
-- bring them back), at most MAX_KEPT entries in all.
local MAX_KEPT = 16

local function stored_entries(layer, state, size)
  local found, order = {}, {}
  if state and string.sub(state, 1, 1) == layer.rule.algo then
    local pos = 2
    while pos + size - 1 <= #state do
      local w, a, b, c
      if size == 32 then
        w, a, b, c = struct.unpack('<dddd', state, pos)
      else
        w, a, b = struct.unpack('<ddd', state, pos)
      end
      found[w] = {a, b, c}
      order[#order + 1] = w
      pos = pos + size
    end
  end
  return found, order
end

-- Appends to `parts` the stored entries of window lengths not in the rule that still matter
-- (counter: until two of its windows have passed; gcra: until its debt drains); returns the latest
-- time any of them matters.
local function keep_others(layer, found, order, parts, now)
  local mine = {}
  for i = 1, #layer.rule.win do
    mine[layer.rule.win[i]] = true
  end
  local latest = 0
  for _, w in ipairs(order) do
    local e = found[w]
    local matters = layer.rule.algo == 'C' and e[1] + 2 * w or e[1] + e[2]
    if not mine[w] and matters > now and #parts <= MAX_KEPT then
      if layer.rule.algo == 'C' then
        parts[#parts + 1] = struct.pack('<dddd', w, e[1], e[2], e[3])
      else
        parts[#parts + 1] = struct.pack('<ddd', w, e[1], e[2])
      end
      latest = math.max(latest, matters)
    end
  end
  return latest
end

-- A duration in µs rounded up to a whole µs, with a nanosecond's tolerance: offsets are computed
-- from now (small numbers, exact enough), never from epoch times, whose doubles are coarser.
local function ceil_us(x)
  return math.max(0, math.ceil(x - 1e-3))
end

-- How long (µs) until the weighted estimate falls to `target` or below, with no new requests:
-- `elapsed` into the current fixed window of length `w`, `c` its count, `p` the previous one's.
local function counter_wait(p, c, elapsed, w, target)
  if p * (w - elapsed) / w + c <= target + EPS then
    return 0
  end
  if c <= target + EPS and p > 0 then
    return ceil_us(w * (1 - (target - c) / p) - elapsed)
  end
  return ceil_us(2 * w - elapsed - w * target / c)
end

local function eval_counter(layer, state, now)
  local rule = layer.rule
  local found, order = stored_entries(layer, state, 32)
  local parts = {'C'}
  local expires = 0
  for i = 1, #rule.lim do
    local n, w = rule.lim[i], rule.win[i]
    local cb = now - now % w
    local c, p = 0, 0
    local s = found[w]
    if s and s[1] == cb then
      c, p = s[2], s[3]
    elseif s and s[1] == cb - w then
      p = s[2]
    end
    local elapsed = now - cb
    local estimate = p * (w - elapsed) / w + c
    local rem_now = math.max(0, math.floor(n - estimate + EPS))
    local rem_after = math.max(0, math.floor(n - estimate - 1 + EPS))
    layer.used_now[i] = n - rem_now
    layer.rem_now[i] = rem_now
    layer.reset_now[i] = now + (rem_now >= n and 0 or counter_wait(p, c, elapsed, w, n - rem_now - 1))
    layer.used_after[i] = n - rem_after
    layer.rem_after[i] = rem_after
    layer.reset_after[i] = now + counter_wait(p, c + 1, elapsed, w, n - rem_after - 1)
    if estimate + 1 <= n + EPS then
      layer.retry[i] = 0
    else
      layer.room = false
      layer.retry[i] = now + counter_wait(p, c, elapsed, w, n - 1)
    end
    parts[#parts + 1] = struct.pack('<dddd', w, cb, c + 1, p)
    expires = math.max(expires, cb + 2 * w)
  end
  expires = math.max(expires, keep_others(layer, found, order, parts, now))
  layer.next_state = table.concat(parts)
  layer.expires_us = expires
end

local function eval_gcra(layer, state, now)
  local rule = layer.rule
  local found, order = stored_entries(layer, state, 24)
  local parts = {'G'}
  local expires = 0
  for i = 1, #rule.lim do
    local n, w = rule.lim[i], rule.win[i]
    local interval = w / n
    local s = found[w]
    local debt = s and math.max(0, s[2] - (now - s[1])) or 0
    local after = debt + interval
    local rem_now = math.max(0, math.floor((w - debt) / interval + EPS))
    local rem_after = math.max(0, math.floor((w - after) / interval + EPS))
    layer.used_now[i] = n - rem_now
    layer.rem_now[i] = rem_now
    layer.reset_now[i] = now + (rem_now >= n and 0 or ceil_us(debt - w + (rem_now + 1) * interval))
    layer.used_after[i] = n - rem_after
    layer.rem_after[i] = rem_after
    layer.reset_after[i] = now + ceil_us(after - w + (rem_after + 1) * interval)
    if after <= w + EPS_US then
      layer.retry[i] = 0
    else
      layer.room = false
      layer.retry[i] = now + ceil_us(after - w)
    end
    parts[#parts + 1] = struct.pack('<ddd', w, now, after)
    expires = math.max(expires, now + after)
  end
  expires = math.max(expires, keep_others(layer, found, order, parts, now))
  layer.next_state = table.concat(parts)
  layer.expires_us = expires
end

-- Evaluates any layer: sliding-log lists from KEYS[first], or the state string of its record field.
local function eval_layer(layer, first, state, now, dry)
  local algo = layer.rule.algo
  if algo == 'L' then
    eval_log(layer, first, now, dry)
  elseif algo == 'C' then
    eval_counter(layer, state, now)
  else
    eval_gcra(layer, state, now)
  end
end

-- Counts the request in a layer that had room. Sliding-log lists expire one window after their
-- newest entry; state fields are written to the record hash `record` as field `field`.
local function commit_layer(layer, now, record, field)
  if layer.rule.algo == 'L' then
    for i = 1, #layer.keys do
      redis.call('RPUSH', layer.keys[i], int(now))
      redis.call('PEXPIRE', layer.keys[i], int(math.ceil(layer.rule.win[i] / 1000)))
    end
  else
    redis.call('HSET', record, field, layer.next_state)
  end
end

-- A record hash of a subject other than a user expires once none of its states matter: `deadline`
-- is its current expiry (field x, ms of the script's clock), moved a window past what is needed so
-- that it moves rarely. The expiry is set relative to now, so a pinned test clock works too.
local function extend_record(record, deadline, needed_us, slack_us, now)
  local needed = math.ceil(needed_us / 1000)
  if not deadline or needed > deadline then
    local at = needed + math.ceil(slack_us / 1000)
    redis.call('HSET', record, 'x', int(at))
    redis.call('PEXPIRE', record, int(at - math.floor(now / 1000)))
  end
end

-- The window an answer describes: allowed, the one with least room left after this request;
-- denied, the refusing one that frees last. Ties go to the last layer, then to its first window.
local function describe(layers, allowed)
  local best, bl, bi = nil, #layers, 1
  for l = #layers, 1, -1 do
    local layer = layers[l]
    for i = 1, #layer.rule.lim do
      local v
      if allowed then
        v = -layer.rem_after[i]
      elseif layer.retry[i] > 0 then
        v = layer.retry[i]
      end
      if v and (not best or v > best) then
        best, bl, bi = v, l, i
      end
    end
  end
  return bl, bi
end

-- {allowed, layer, window, limit, used, remaining, window_us, reset_us, retry_us, now_us}
local function answer(layers, allowed, now)
  local l, i = describe(layers, allowed)
  local layer = layers[l]
  if allowed then
    return {1, l, i, layer.rule.lim[i], layer.used_after[i], layer.rem_after[i], layer.rule.win[i],
      layer.reset_after[i], 0, now}
  end
  return {0, l, i, layer.rule.lim[i], layer.used_now[i], layer.rem_now[i], layer.rule.win[i],
    layer.reset_now[i], layer.retry[i], now}
end

-- Validates a session and renews its idle lifetime, and reads the user's fields. A session is
-- valid while its hash exists, its absolute expiry is ahead and the user's index still lists it
-- (revocation removes it there). The renewal (two writes) is skipped while the last one is younger
-- than a tenth of the idle lifetime (at most 1 s), and on a dry run.
-- Returns status (1 ok, 0 no session, -1 user missing or disabled), the user's HMGET reply
-- (tier, disabled, then the fields asked for) and the session's absolute expiry (ms).
local function session_touch(session_key, index_key, user_key, sid, idle_ms, now_ms, dry, f1, f2)
  local s = redis.call('HMGET', session_key, 'exp', 'last')
  local exp = tonumber(s[1])
  if not exp or exp <= now_ms or not redis.call('ZRANK', index_key, sid) then
    if not dry then
      redis.call('DEL', session_key)
      redis.call('ZREM', index_key, sid)
    end
    return 0
  end
  local user
  if f1 then
    user = redis.call('HMGET', user_key, 'tier', 'disabled', f1, f2)
  else
    user = redis.call('HMGET', user_key, 'tier', 'disabled')
  end
  if not user[1] or user[2] == '1' then
    return -1
  end
  if not dry and now_ms - (tonumber(s[2]) or 0) >= math.min(1000, idle_ms / 10) then
    redis.call('HSET', session_key, 'last', int(now_ms))
    redis.call('PEXPIRE', session_key, int(math.min(idle_ms, exp - now_ms)))
  end
  return 1, user, exp
end
