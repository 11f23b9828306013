-- Shared functions, prepended by the loader to every script in this folder. The limiter's arithmetic
-- mirrors src/ratelimit/algorithms.ts (the memory store's), which the contract tests hold both to.
-- Every proxied request waits on these scripts, and in Redis every Lua step costs: a rule of one
-- window (the usual case) is decided by straight-line code, rules arrive packed in binary, and the
-- answer leaves as one packed string. Only rules of several windows, or several layers, build tables.

-- The library functions the hot path uses, as locals: an upvalue costs Lua less than a global
-- table lookup on every use (string.sub: 110 against 170 ns). Redis loads a function library
-- without the standard globals (they exist only while a function runs), so the loader makes every
-- script and function start with `if not call then bind_globals() end`.
local sub, byte, find, match, gmatch, format, char, concat, spack, sunpack, floor, ceil, min, max, call, tonum
local function bind_globals()
  sub, byte, find, match, gmatch, format, char = string.sub, string.byte, string.find, string.match,
    string.gmatch, string.format, string.char
  concat, spack, sunpack = table.concat, struct.pack, struct.unpack
  floor, ceil, min, max = math.floor, math.ceil, math.min, math.max
  call, tonum = redis.call, tonumber
end

-- Now in microseconds: ARGV "now" when a test pins the clock, otherwise Redis TIME (one clock for all).
-- Every script that counts asks it first, so `real_clock` tells the rest of the call which it is.
local real_clock = false
local function clock_us(pinned)
  if pinned and pinned ~= '' then
    real_clock = false
    return tonum(pinned)
  end
  real_clock = true
  local t = call('TIME')
  -- Arithmetic converts the digits once; tonumber would parse each twice.
  return t[1] * 1000000 + t[2]
end

-- Numbers go to Redis as %d strings: Lua's default formatting would round microsecond times.
local function int(n)
  return format('%d', n)
end

-- Counts compare with a little slack (the counter's estimate is a float); gcra's durations too.
local EPS, EPS_US = 1e-9, 1e-3

-- A duration in µs rounded up to a whole µs, with a nanosecond's tolerance: offsets are computed
-- from now (small numbers, exact enough), never from epoch times, whose doubles are coarser.
local function ceil_us(x)
  if x <= 0 then
    return 0
  end
  return ceil(x - 1e-3)
end

-- With Redis functions the library's upvalues live from one call to the next, so what the hot path
-- derives from its arguments is kept: a rule's windows, a tier table's positions, a category's
-- field names. Argument strings are interned by Lua, so a lookup is one hash probe. The memo is
-- bounded (dropped whole when full); in script mode (EVALSHA) it starts empty on every call.
local memo, memo_size = {}, 0
local function remember(key, value)
  if memo_size >= 512 then
    memo, memo_size = {}, 0
  end
  memo[key], memo_size = value, memo_size + 1
  return value
end

-- A rule, packed by src/store/redis/codec.ts as text of fixed widths (ioredis writes text
-- arguments cheaper than binary ones): a digit for the algorithm (1 sliding log, 2 sliding
-- counter, 3 gcra), a digit for the number of windows, then per window its limit in 6 hex digits
-- and its length in µs in 10 (shortest first). A tier table is ";<tier>=<4 hex digits>" per tier,
-- "|", then the rules; the digits give the position of the tier's rule in the string.
local function window_at(spec, pos)
  local rule = memo[spec]
  if not rule then
    rule = remember(spec, {})
  end
  local at = rule[pos]
  if not at then
    at = {tonum(sub(spec, pos, pos + 5), 16), tonum(sub(spec, pos + 6, pos + 15), 16)}
    rule[pos] = at
  end
  return at[1], at[2]
end

-- The tier table's positions live in its rule's memo entry (under the string key "tiers", next to
-- window_at's numeric positions), found by the argument itself: no key is built per call.
local function rule_of_tier(table_, tier)
  local rule = memo[table_]
  if not rule then
    rule = remember(table_, {})
  end
  local tiers = rule.tiers
  if not tiers then
    tiers = {}
    for name, at in gmatch(match(table_, '^[^|]*'), ';([^=;|]+)=(%x%x%x%x)') do
      tiers[name] = tonum(at, 16)
    end
    rule.tiers = tiers
  end
  return tiers[tier]
end

-- The user hash's fields of a category, its own windows (o:) and its counter or gcra state (r:),
-- and what finds the own windows in a session's v.
-- Kept under the category's name itself: a policy's names are lowercase words, never a rule's text
-- (a digit or ';' first) nor a number (extend_log's keys).
local function fields_of(category)
  local f = memo[category]
  if not f then
    f = remember(category, {'o:' .. category, 'r:' .. category, '\n' .. category .. '='})
  end
  return f[1], f[2], f[3]
end

-- Each window's outcome: room, then used, remaining and reset as it stands, the same with this
-- request counted, and when the request would be allowed (0: now). Counter and gcra also give
-- their state entry for the window, packed, and until when it matters.

-- Between index `lo` (stale) and `hi` (fresh, or past the end), the first index whose entry is
-- fresh (later than `cutoff`), by halving; an index past the end counts as fresh. Returns it and
-- its entry as a number (`value`, hi's entry, when hi is the answer; nil past the end).
local function bisect_fresh(key, cutoff, lo, hi, value)
  while hi - lo > 1 do
    local mid = floor((lo + hi) / 2)
    local m = call('LINDEX', key, mid)
    if not m or m + 0 > cutoff then
      hi, value = mid, m and m + 0
    else
      lo = mid
    end
  end
  return hi, value
end

-- Sliding log: one list of request times (µs, oldest first) per window. Counts the fresh entries
-- and, unless dry, drops the stale ones; the first fresh one is found by galloping from the head,
-- so a busy window costs one extra read. Returns count, oldest fresh entry, its index in the list.
local function log_fresh(key, w, now, dry, record, field)
  local head = call('LINDEX', key, '0')
  if not head then
    -- No list, and the record holds a counter's or gcra's state of the category: the general way
    -- seeds the log from it (see evaluate).
    if record and call('HEXISTS', record, field) == 1 then
      return nil
    end
    return 0, now, 0
  end
  head = head + 0
  local len = call('LLEN', key)
  local cutoff = now - w
  if head > cutoff then
    return len, head, 0
  end
  local lo, hi, value = 0, 1, nil
  while true do
    if hi >= len - 1 then
      hi = len - 1
      value = tonum(call('LINDEX', key, hi))
      if value <= cutoff then
        if not dry then
          call('DEL', key)
        end
        return 0, now, len
      end
      break
    end
    value = tonum(call('LINDEX', key, hi))
    if value > cutoff then
      break
    end
    lo, hi = hi, hi * 2
  end
  hi, value = bisect_fresh(key, cutoff, lo, hi, value)
  if dry then
    return len - hi, value, hi
  end
  call('LTRIM', key, hi, -1)
  return len - hi, value, 0
end

-- A window of a list whose longest window is longer (the list holds the request times of every
-- window of the layer, see general's evaluate): its fresh entries are the newest, found by
-- galloping from the tail, so a short window of a long list costs a few reads near the tail.
-- Never drops anything. Returns as log_fresh does.
local function log_recent(key, w, now)
  local len = call('LLEN', key)
  local cutoff = now - w
  -- the newest `fresh` entries are known fresh (`value` the oldest of them), the `stale`-th newest not
  local fresh, stale, value = 0, 1, nil
  while true do
    if stale >= len then
      local v = len > 0 and tonum(call('LINDEX', key, 0)) or nil
      if not v or v <= cutoff then
        stale = len
        break
      end
      return len, v, 0
    end
    local v = tonum(call('LINDEX', key, -stale))
    if v <= cutoff then
      break
    end
    fresh, value, stale = stale, v, stale * 2
  end
  while stale - fresh > 1 do
    local mid = floor((fresh + stale) / 2)
    local v = tonum(call('LINDEX', key, -mid))
    if v > cutoff then
      fresh, value = mid, v
    else
      stale = mid
    end
  end
  if fresh == 0 then
    return 0, now, len
  end
  return fresh, value, len - fresh
end

-- One sliding-log window's outcome (see "Each window's outcome" above). `recent`: the list's
-- longest window is another, longer one (see log_recent); the window neither drops entries then.
local function log_window(key, n, w, now, dry, recent, record, field)
  local used, oldest, at
  if recent then
    used, oldest, at = log_recent(key, w, now)
  else
    used, oldest, at = log_fresh(key, w, now, dry, record, field)
    if not used then
      return nil
    end
  end
  local rem = n - used
  if rem > 0 then
    return true, used, rem, used == 0 and now or oldest + w, used + 1, rem - 1, oldest + w, 0
  end
  -- the (used - limit)-th oldest entry's departure makes room
  local frees = rem == 0 and oldest or tonum(call('LINDEX', key, at + used - n))
  return false, used, 0, oldest + w, used + 1, 0, oldest + w, frees + w
end

-- log_window for a request expected to find room (the caller's last answer for this window had
-- room left), counted: instead of reading the length first, it drops what left the window (found
-- as log_fresh finds it, an index past the end standing for "all of it"), adds the request and
-- takes the length RPUSH returns, and takes the request back (RPOP) when there was no room after
-- all. One read less than log_window and a push for the usual allowed check.
local function log_push(key, n, w, now, record, field)
  local cutoff = now - w
  local oldest = call('LINDEX', key, '0')
  if not oldest then
    if call('HEXISTS', record, field) == 1 then
      return nil
    end
    oldest = now
  else
    oldest = oldest + 0
    if oldest <= cutoff then
      local lo, fresh, v = 0, 1, nil
      while true do
        v = call('LINDEX', key, fresh)
        v = v and v + 0
        if not v or v > cutoff then
          break
        end
        lo, fresh = fresh, fresh * 2
      end
      fresh, v = bisect_fresh(key, cutoff, lo, fresh, v)
      oldest = v or now
      -- past the end, LTRIM removes the key: RPUSH makes it anew, and extend_log gives it an expiry
      call('LTRIM', key, fresh, -1)
    end
  end
  local used = call('RPUSH', key, int(now)) - 1
  local rem = n - used
  if rem > 0 then
    return true, used, rem, used == 0 and now or oldest + w, used + 1, rem - 1, oldest + w, 0
  end
  call('RPOP', key)
  local frees = rem == 0 and oldest or tonum(call('LINDEX', key, used - n))
  return false, used, 0, oldest + w, used + 1, 0, oldest + w, frees + w
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

-- Sliding counter; `sb`, `sc`, `sp` the stored fixed window start, count and previous count.
local function counter_window(n, w, sb, sc, sp, now)
  local cb = now - now % w
  local c, p = 0, 0
  if sb == cb then
    c, p = sc, sp
  elseif sb == cb - w then
    p = sc
  end
  local elapsed = now - cb
  local estimate = p * (w - elapsed) / w + c
  local rem_now = floor(n - estimate + EPS)
  if rem_now < 0 then
    rem_now = 0
  end
  local rem_after = rem_now > 0 and floor(n - estimate - 1 + EPS) or 0
  local room = estimate + 1 <= n + EPS
  local reset_now = now
  if rem_now < n then
    reset_now = now + counter_wait(p, c, elapsed, w, n - rem_now - 1)
  end
  return room, n - rem_now, rem_now, reset_now, n - rem_after, rem_after,
    now + counter_wait(p, c + 1, elapsed, w, n - rem_after - 1),
    room and 0 or now + counter_wait(p, c, elapsed, w, n - 1),
    spack('<dddd', w, cb, c + 1, p), cb + 2 * w
end

-- gcra; `sa`, `sd`, `sn` the stored time of the last change, the debt then and the limit it was
-- counted with. A debt is requests times their interval: under another limit it stands for the
-- same number of requests, each at the new interval (so a lowered limit is no fresh start).
local function gcra_window(n, w, sa, sd, now, sn)
  local interval = w / n
  local debt = 0
  if sa then
    debt = sd - (now - sa)
    if debt < 0 then
      debt = 0
    end
    if sn and sn ~= n then
      debt = debt * sn / n
    end
  end
  local after = debt + interval
  local rem_now = floor((w - debt) / interval + EPS)
  if rem_now < 0 then
    rem_now = 0
  end
  local rem_after = floor((w - after) / interval + EPS)
  if rem_after < 0 then
    rem_after = 0
  end
  local room = after <= w + EPS_US
  local reset_now = now
  if rem_now < n then
    reset_now = now + ceil_us(debt - w + (rem_now + 1) * interval)
  end
  return room, n - rem_now, rem_now, reset_now, n - rem_after, rem_after,
    now + ceil_us(after - w + (rem_after + 1) * interval), room and 0 or now + ceil_us(after - w),
    spack('<dddd', w, now, after, n), now + after
end

-- Counter and gcra keep their state in one field of the subject's record hash: 'C' or 'Q', then
-- per window length four packed doubles (counter: w, fixed window start, count, previous count;
-- gcra: w, time of the last change, debt, the limit it was counted with). 'G', gcra's state before
-- it kept its limit (three doubles), is read only as evidence for a new state (see evidence). The
-- usual state, one entry for a rule of one window: returns its numbers when `state` is exactly that.
local function single_entry(state, letter, w)
  if state and #state == 33 and sub(state, 1, 1) == letter then
    local sw, a, b, c = sunpack('<dddd', state, 2)
    if sw == w then
      return true, a, b, c
    end
  end
  return false
end

-- The answer, one packed string: 10 little-endian doubles (allowed 1|0, layer, window, limit,
-- used, remaining, window µs, reset µs, retry µs, now µs), then whatever the script appends;
-- with `extra`, an 11th double in the same call (authorize's session expiry).
local function pack_answer(allowed, layer, window, n, w, used, rem, reset, retry, now, extra)
  if extra then
    return spack('<ddddddddddd', allowed and 1 or 0, layer, window, n, used, rem, w, reset, retry, now, extra)
  end
  return spack('<dddddddddd', allowed and 1 or 0, layer, window, n, used, rem, w, reset, retry, now)
end

-- The usual answer, of a rule of one window decided straight through (single): only what the caller
-- does not know already, since it sent that rule: 5 doubles (3 allowed | 2 denied, which also tells
-- it from a full answer's 1 | 0; used, reset µs, retry µs, now µs), the remaining being the limit
-- less the used (0 at least). With `extra`, a 6th double and then the text `tail`, in the same call
-- (authorize's session expiry and tier). Each double packed costs Redis about 600 instructions.
local function pack_usual(allowed, used, reset, retry, now, extra, tail)
  if extra then
    return spack('<ddddddc0', allowed and 3 or 2, used, reset, retry, now, extra, tail)
  end
  return spack('<ddddd', allowed and 3 or 2, used, reset, retry, now)
end

-- A sliding-log list must outlive its newest entry by a window. A push makes sure of it by reading
-- the list's TTL (a read costs Redis less than a write) and moving it only when it falls short, then
-- to a little past a window (a hundredth of it, at most 1 s), so that a busy list's expiry is written
-- once per that slack instead of on every request. Nothing shortens an expiry: every push to a list
-- comes here, and this only ever moves one later.
--
-- With Redis's clock the expiry is set as an absolute time, and the library keeps it (`known`: list
-- key -> that time, µs), so that the pushes within the slack need not read the TTL at all: one Redis
-- command less for the usual allowed check. Sound because every push to a list runs in this Redis
-- and passes here: a list's expiry only moves later, and a list deleted since (trimmed empty, reset,
-- evicted) is made anew by a push that finds it new (`created`: RPUSH answered 1), which sets its
-- expiry and what is known of it. A test's pinned clock is not the one expiries run on: with it, the
-- expiry is set relative to Redis's and nothing is kept. Bounded (dropped whole when full); a
-- function library's upvalues start empty when it loads (a restart, a promoted replica, a new
-- version) and, in script mode (EVALSHA), on every call, where the TTL is read as before.
local known, known_size = {}, 0
local function extend_log(key, w, now, created)
  local until_us = known[key]
  if until_us and not created and real_clock and now + w <= until_us then
    return
  end
  local ms = memo[w]
  if not ms then
    local whole = ceil(w / 1000)
    ms = remember(w, {whole, whole + min(1000, ceil(whole / 100))})
  end
  if not created and call('PTTL', key) >= ms[1] then
    return
  end
  if not real_clock then
    call('PEXPIRE', key, int(ms[2]))
    return
  end
  local at = floor(now / 1000) + ms[2]
  call('PEXPIREAT', key, int(at))
  if not until_us then
    if known_size >= 10000 then
      known, known_size = {}, 0
    end
    known_size = known_size + 1
  end
  known[key] = at * 1000
end

-- Decides one layer of one window, straight through: returns the usual answer (see pack_usual)
-- and, when counted, writes it (sliding log: RPUSH on `key`, see extend_log; counter and gcra:
-- the state into field `field` of `record`). `state` is the field's current value. The second
-- result is false when the state was not the usual one (the caller takes the general way), the
-- third when the window had room, the fourth until when the written state matters. `extra` and
-- `tail`, packed right after the answer (see pack_usual). `hopeful`: the caller expects room
-- (a sliding log then counts by log_push).
local function single(spec, pos, key, record, field, state, now, dry, hopeful, extra, tail)
  local algo = byte(spec, pos) - 48
  local n, w = window_at(spec, pos + 2)
  local room, used_now, rem_now, reset_now, used_after, rem_after, reset_after, retry, packed, expires
  if algo == 1 then
    local length
    if hopeful and not dry then
      room, used_now, rem_now, reset_now, used_after, rem_after, reset_after, retry =
        log_push(key, n, w, now, record, field)
      length = used_after
    else
      room, used_now, rem_now, reset_now, used_after, rem_after, reset_after, retry =
        log_window(key, n, w, now, dry, false, record, field)
    end
    if room == nil then
      return nil, false
    end
    if not hopeful or dry then
      if room and not dry then
        length = call('RPUSH', key, int(now))
      end
    end
    if room and not dry then
      extend_log(key, w, now, length == 1)
    end
  else
    local letter = algo == 2 and 'C' or 'Q'
    local usual, a, b, c = single_entry(state, letter, w)
    if (state and not usual) or (not state and call('EXISTS', key) == 1) then
      -- Entries of other lengths or of the other algorithm, or a sliding log's list: the general
      -- way, which counts what they show.
      return nil, false
    end
    if algo == 2 then
      room, used_now, rem_now, reset_now, used_after, rem_after, reset_after, retry, packed, expires =
        counter_window(n, w, a, b, c, now)
    else
      room, used_now, rem_now, reset_now, used_after, rem_after, reset_after, retry, packed, expires =
        gcra_window(n, w, a, b, now, c)
    end
    if room and not dry then
      call('HSET', record, field, letter .. packed)
    end
  end
  if room then
    return pack_usual(true, used_after, reset_after, 0, now, extra, tail), true, true, expires, w
  end
  return pack_usual(false, used_now, reset_now, retry, now, extra, tail), true, false, expires, w
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

-- The general way: layers of any number of windows, evaluated into tables, counted in all or none.
-- Built on demand (its functions cost their creation on every call that defines them).
local function general()
  local MAX_KEPT = 16

  -- A layer: `algo` (1 L, 2 C, 3 G), `n` windows, `room`; per window i, from b = 10(i-1): [b+1]
  -- limit, [b+2] length, then the outcome (see log_window): [b+3] used, [b+4] remaining, [b+5]
  -- reset as it stands; [b+6], [b+7], [b+8] the same with this request counted; [b+9] retry.
  local function layer_at(spec, pos)
    local n = byte(spec, pos + 1) - 48
    local layer = {algo = byte(spec, pos) - 48, n = n, room = true}
    pos = pos + 2
    for i = 1, n do
      layer[10 * i - 9], layer[10 * i - 8] = window_at(spec, pos)
      pos = pos + 16
    end
    return layer
  end

  -- A user's own windows as the user hash holds them: "<limit>/<window µs>[,…]", counted with
  -- the algorithm `algo`.
  local function layer_of_text(text, algo)
    local layer = {algo = algo, n = 0, room = true}
    local pos, b = 1, 0
    while true do
      local l, w, nxt = match(text, '^(%d+)/(%d+)()', pos)
      if not l then
        return layer
      end
      layer[b + 1], layer[b + 2] = tonum(l), tonum(w)
      layer.n = layer.n + 1
      if byte(text, nxt) ~= 44 then
        return layer
      end
      pos, b = nxt + 1, b + 10
    end
  end

  local function set(layer, i, room, ...)
    local b = 10 * i - 8
    local v = {...}
    for k = 1, 8 do
      layer[b + k] = v[k]
    end
    if not room then
      layer.room = false
    end
  end

  -- The stored entries of a counter or gcra state: per window of the layer, its numbers; the
  -- packed entries of other window lengths that still matter (a reload may bring them back), with
  -- the latest time one of them matters; and every entry, of either algorithm, as evidence for a
  -- window that has no entry of its own (see evidence).
  local function entries(layer, state, now)
    local letter = layer.algo == 2 and 'C' or 'Q'
    local found, kept, latest, all = {}, {}, 0, {}
    local kind = state and sub(state, 1, 1)
    if kind == 'C' or kind == 'Q' or kind == 'G' then
      local size = kind == 'G' and 24 or 32
      local fmt = size == 32 and '<dddd' or '<ddd'
      for pos = 2, #state - size + 1, size do
        local w, a, b, c = sunpack(fmt, state, pos)
        all[#all + 1] = {kind, w, a, b, c}
        if kind == letter then
          local slot
          for i = 1, layer.n do
            if layer[10 * i - 8] == w then
              slot = i
            end
          end
          if slot then
            found[slot] = {a, b, c}
          else
            local matters = layer.algo == 2 and a + 2 * w or a + b
            if matters > now and #kept < MAX_KEPT - layer.n then
              kept[#kept + 1] = sub(state, pos, pos + size - 1)
              latest = max(latest, matters)
            end
          end
        end
      end
    end
    return found, concat(kept), latest, all
  end

  -- How many requests of a window of `n` in `w` µs the entries show, for a window with no entry of
  -- its own (a new length or a new algorithm); mirrors src/ratelimit/algorithms.ts's evidence: a
  -- counter entry its counts whose fixed windows reach into this one, whole (nothing tells when
  -- within them they came); a gcra entry the requests its debt still stands for (debt over its
  -- interval); a gcra entry from before gcra kept its limit ('G'), the share of its window its
  -- debt fills, times n.
  local function evidence(all, n, w, now)
    local most, from = 0, now - w
    for _, e in ipairs(all) do
      local k = 0
      if e[1] == 'C' then
        local ew, b = e[2], e[3]
        if max(b, min(b + ew, now)) > from then
          k = e[4]
        end
        if b > from then
          k = k + e[5]
        end
      else
        local left = e[4] - (now - e[3])
        if left > 0 then
          if e[1] == 'Q' then
            -- the requests the debt stands for, each at its own limit's interval
            k = left * e[5] / e[2]
          else
            k = min(left, e[2]) / e[2] * n
          end
        end
      end
      if k > most then
        most = k
      end
    end
    return most
  end

  -- Evaluates a layer: its sliding-log list keys[first], or `state`, the record field's value.
  -- A layer's sliding-log windows share one list: a request counts in all of them or in none, so
  -- their lists would hold the same times, each cut at its own length. The list is cut at the
  -- longest window, and each window counts the entries inside its own span: a window's count is
  -- what it is, whatever windows came and went before it (a reload, an override, a new order).
  -- A sliding log's list that does not exist while the record holds a counter's or gcra's state of
  -- the category (the category was one until a change of policy): as many entries, at now, as that
  -- state shows for the layer's fullest window (see evidence); the first count writes them and
  -- drops the record's state. Returns that count, or nil when there is nothing to take over.
  local function log_seed(layer, key, now, record, field)
    if not record or call('EXISTS', key) == 1 then
      return nil
    end
    local state = call('HGET', record, field)
    if not state then
      return nil
    end
    local _, _, _, all = entries({algo = 1, n = 0}, state, now)
    local most = 0
    for i = 1, layer.n do
      local n = layer[10 * i - 9]
      most = max(most, min(evidence(all, n, layer[10 * i - 8], now), n))
    end
    return ceil(most - EPS)
  end

  -- Evaluates a layer: its sliding-log list keys[first], or `state`, the record field's value
  -- (`record`, `field`: where that state lives).
  -- A layer's sliding-log windows share one list: a request counts in all of them or in none, so
  -- their lists would hold the same times, each cut at its own length. The list is cut at the
  -- longest window, and each window counts the entries inside its own span: a window's count is
  -- what it is, whatever windows came and went before it (a reload, an override, a new order).
  local function evaluate(layer, keys, first, state, now, dry, record, field)
    local key = keys[first]
    if layer.algo == 1 then
      local longest = 1
      for i = 2, layer.n do
        if layer[10 * i - 8] > layer[10 * longest - 8] then
          longest = i
        end
      end
      layer.key, layer.longest = key, longest
      local seeded = log_seed(layer, key, now, record, field)
      layer.seeded = seeded
      if seeded then
        -- No list: every window holds the seeded entries, all at now.
        for i = 1, layer.n do
          local n, w = layer[10 * i - 9], layer[10 * i - 8]
          if seeded < n then
            set(layer, i, true, seeded, n - seeded, seeded == 0 and now or now + w, seeded + 1, n - seeded - 1,
              now + w, 0)
          else
            set(layer, i, false, seeded, 0, now + w, seeded + 1, 0, now + w, now + w)
          end
        end
        return
      end
      set(layer, longest, log_window(key, layer[10 * longest - 9], layer[10 * longest - 8], now, dry))
      for i = 1, layer.n do
        if i ~= longest then
          set(layer, i, log_window(key, layer[10 * i - 9], layer[10 * i - 8], now, dry, true))
        end
      end
      return
    end
    local found, kept, latest, all = entries(layer, state, now)
    local parts, expires = {layer.algo == 2 and 'C' or 'Q'}, latest
    for i = 1, layer.n do
      local n, w, s = layer[10 * i - 9], layer[10 * i - 8], found[i]
      if not s then
        -- No entry of its own: it starts from what the others and a sliding log's list show
        -- (counter: in its fixed window; gcra: that much in debt); the first count drops the list.
        local k = evidence(all, n, w, now)
        if key then
          k = max(k, (log_recent(key, w, now)))
          layer.list = key
        end
        if layer.algo == 2 then
          s = {now - now % w, k, 0}
        else
          s = {now, min(k, n) * (w / n), n}
        end
      end
      local r = layer.algo == 2 and {counter_window(n, w, s[1], s[2], s[3], now)} or
        {gcra_window(n, w, s[1], s[2], now, s[3])}
      set(layer, i, unpack(r, 1, 8))
      parts[#parts + 1] = r[9]
      expires = max(expires, r[10])
    end
    parts[#parts + 1] = kept
    layer.next_state, layer.expires_us = concat(parts), expires
  end

  -- Counts the request in a layer that had room (see single).
  local function commit(layer, now, record, field)
    if layer.algo == 1 then
      local stamp, stamps = int(now), {}
      for i = 0, layer.seeded or 0 do
        stamps[i + 1] = stamp
      end
      local length = call('RPUSH', layer.key, unpack(stamps))
      extend_log(layer.key, layer[10 * layer.longest - 8], now, length == #stamps)
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

  -- Whether the request counts: every layer has room, but for full shadow layers (`shadow`, policy
  -- mode shadow), which refuse nothing.
  local function counts(layers)
    for l = 1, #layers do
      if not layers[l].room and not layers[l].shadow then
        return false
      end
    end
    return true
  end

  -- The window an answer describes: allowed, the one with least room left after this request;
  -- denied, the refusing one that frees last, of an enforced layer when one refused (a shadow
  -- layer's would read as a pass). Ties go to the last layer, then its first window.
  local function answer(layers, allowed, now)
    local enforced_full = not allowed and not counts(layers)
    local bl, bi, best = #layers, 1, nil
    for l = #layers, 1, -1 do
      local layer = layers[l]
      local skip = enforced_full and layer.shadow
      for i = 1, skip and 0 or layer.n do
        local b = 10 * i - 10
        local v
        if allowed then
          v = -layer[b + 7]
        elseif layer[b + 9] > 0 then
          v = layer[b + 9]
        end
        if v and (not best or v > best) then
          best, bl, bi = v, l, i
        end
      end
    end
    local layer = layers[bl]
    local b = 10 * bi - 10
    if allowed then
      return pack_answer(true, bl, bi, layer[b + 1], layer[b + 2], layer[b + 6], layer[b + 7], layer[b + 8], 0, now)
    end
    return pack_answer(false, bl, bi, layer[b + 1], layer[b + 2], layer[b + 3], layer[b + 4], layer[b + 5],
      layer[b + 9], now)
  end

  return {layer_at = layer_at, layer_of_text = layer_of_text, evaluate = evaluate, commit = commit,
    counts = counts, answer = answer}
end

-- The counter or gcra state in field `field` of `record` (a user's is the user hash), read only
-- for a rule that needs it and when not `read` already (then it is `state`).
local function state_of(algo, read, state, record, field)
  if algo == 1 or read then
    return state
  end
  return call('HGET', record, field) or nil
end

-- A session of the user whose session index is `index_key`: the sessions' keys share its prefix.
local function session_key_of(index_key, sid)
  return sub(index_key, 1, -9) .. 's:' .. sid
end

-- The user fields that sessions carry a copy of: the tier, the disabled flag, the own windows.
local function carried(field)
  return field == 'tier' or field == 'disabled' or sub(field, 1, 2) == 'o:'
end

-- What a check needs of a session and its user, in one field (v) of the session hash, so that a
-- check reads one field of one hash, at fixed places so that it parses cheaply: the last renewal
-- and the absolute expiry (ms, 13 digits each), one character for the tier's length (48 + length),
-- the tier ("!" for a disabled or deleted user), then "\n<category>=<own windows>" per category
-- where the user has windows of their own. Written at login and rewritten by every change of the
-- user (userUpdate, userDelete) in the same step, so that a new tier or a disable applies at once.
-- `last` and `exp` are digits; `user` is the user hash as HGETALL gives it (empty: deleted).
local function session_view(last, exp, user)
  local tier, disabled, own = nil, nil, {}
  for i = 1, #user, 2 do
    local f = user[i]
    if f == 'tier' then
      tier = user[i + 1]
    elseif f == 'disabled' then
      disabled = user[i + 1]
    elseif sub(f, 1, 2) == 'o:' then
      own[#own + 1] = '\n' .. sub(f, 3) .. '=' .. user[i + 1]
    end
  end
  if not tier or disabled == '1' then
    tier = '!'
  end
  return format('%013d%013d', last, exp) .. char(48 + #tier) .. tier .. concat(own)
end

-- A session's v rebuilt from the user hash `user`, keeping its renewal time and expiry.
local function session_view_again(v, user)
  return session_view(sub(v, 1, 13), sub(v, 14, 26), user)
end

-- Validates a session and renews its idle lifetime. A session is valid while its hash exists, its
-- absolute expiry is ahead and its user is neither disabled nor deleted; revocation deletes the
-- hash. The renewal (two writes) is skipped while the last one is younger than a tenth of the idle
-- lifetime (at most 1 s), and on a dry run. `idle_ms` is a string of digits. `needle` is
-- "\n<category>=", to find the user's own windows of the category in v (nil: not needed).
-- A session from before sessions carried v is checked as it was then: still listed in the user's
-- index, with the user hash read for tier, disabled, `own_field` and `state_field`.
-- Returns status (1 ok, 0 no session, -1 user missing or disabled), the tier, the own windows (or
-- nil), the session's absolute expiry (ms), whether `state_field` was read, and its value.
local function session_touch(session_key, index_key, user_key, sid, idle_ms, now_ms, dry, needle, own_field,
                             state_field)
  local v = call('HGET', session_key, 'v')
  local exp, last, tier, own, read, state
  if v then
    exp = sub(v, 14, 26) + 0
    local ends = 27 + byte(v, 27) - 48
    tier = sub(v, 28, ends)
    if needle and #v > ends then
      local at = find(v, needle, ends + 1, true)
      if at then
        own = match(v, '^[^\n]*', at + #needle)
      end
    end
  else
    local s = call('HMGET', session_key, 'exp', 'last')
    exp = s[1] and s[1] + 0
    last = s[2] and s[2] + 0 or 0
    if exp and exp > now_ms then
      if call('ZRANK', index_key, sid) then
        local user
        if own_field then
          user = call('HMGET', user_key, 'tier', 'disabled', own_field, state_field)
        else
          user = call('HMGET', user_key, 'tier', 'disabled')
        end
        tier, own, read, state = user[1] or '!', user[3], true, user[4]
        if user[2] == '1' then
          tier = '!'
        end
      else
        exp = nil
      end
    end
  end
  if not exp or exp <= now_ms then
    if not dry then
      call('DEL', session_key)
      call('ZREM', index_key, sid)
    end
    return 0
  end
  if tier == '!' then
    return -1
  end
  if not dry then
    if v then
      last = sub(v, 1, 13) + 0
    end
    local since = now_ms - last
    -- idle_ms (digits) is parsed only when it could matter: under 10 s, its tenth is under 1 s.
    if since >= 1000 or (#idle_ms < 5 and since * 10 >= tonum(idle_ms)) then
      idle_ms = tonum(idle_ms)
      if v then
        call('HSET', session_key, 'v', format('%013d', now_ms) .. sub(v, 14))
      else
        call('HSET', session_key, 'last', int(now_ms))
      end
      call('PEXPIRE', session_key, int(min(idle_ms, exp - now_ms)))
    end
  end
  return 1, tier, own, exp, read, state
end
