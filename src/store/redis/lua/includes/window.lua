-- The three algorithms' arithmetic for one window, mirroring src/ratelimit/algorithms.ts (the
-- memory store's), which the contract tests hold both to. Every function answers the window's
-- outcome: room for `k` more requests, then used, remaining and reset (µs) as it stands, the same
-- with the `k` requests counted, and when they would be allowed (0: now). Counter and gcra also
-- give their state entry for the window, packed, and until when it matters.

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

-- Sliding log, the list's longest window: counts the fresh entries and, unless dry, drops the stale
-- ones; the first fresh one is found by galloping from the head, so a busy window costs one extra
-- read. `head` is the list's first entry (the list exists). Returns count, oldest fresh entry, its
-- index in the list (after any trim).
local function log_fresh(key, w, now, dry, head)
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

-- A shorter window of a list whose longest window is another: its fresh entries are the newest,
-- found by galloping from the tail (a few reads near the tail). Never drops anything. Returns as
-- log_fresh does.
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

-- One sliding-log window of `n` in `w` µs. `recent`: the list's longest window is another, longer
-- one (see log_recent); the window then drops nothing. Otherwise `head` is the list's first entry.
local function log_window(key, n, w, k, now, dry, recent, head)
  local used, oldest, at
  if recent then
    used, oldest, at = log_recent(key, w, now)
  else
    used, oldest, at = log_fresh(key, w, now, dry, head)
  end
  local rem = max(0, n - used)
  local reset = used == 0 and now or oldest + w
  if used + k <= n then
    return true, used, rem, reset, used + k, rem - k, k > 0 and oldest + w or reset, 0
  end
  -- the (used + k - n)-th oldest entry's departure makes room (more than the limit: never, so a window)
  local nth = used + k - n
  local frees = now
  if nth == 1 then
    frees = oldest
  elseif nth <= used then
    frees = tonum(call('LINDEX', key, at + nth - 1))
  end
  return false, used, rem, reset, used + k, 0, oldest + w, frees + w
end

-- How long (µs) until the weighted estimate falls to `target` or below, with no new requests:
-- `elapsed` into the current fixed window of length `w`, `c` its count, `p` the previous one's.
local function counter_wait(p, c, elapsed, w, target)
  if p * (w - elapsed) / w + c <= target + EPS then
    return 0
  end
  if target < 0 then
    return 2 * w - elapsed
  end
  if c <= target + EPS and p > 0 then
    return ceil_us(w * (1 - (target - c) / p) - elapsed)
  end
  return ceil_us(2 * w - elapsed - w * target / c)
end

-- Sliding counter; `sb`, `sc`, `sp` the stored fixed window start, count and previous count.
local function counter_window(n, w, k, sb, sc, sp, now)
  local cb = now - now % w
  local c, p = 0, 0
  if sb == cb then
    c, p = sc, sp
  elseif sb == cb - w then
    p = sc
  end
  local elapsed = now - cb
  local estimate = p * (w - elapsed) / w + c
  local rem_now = max(0, floor(n - estimate + EPS))
  local rem_after = rem_now > 0 and max(0, floor(n - estimate - k + EPS)) or 0
  local room = estimate + k <= n + EPS
  local reset_now = now
  if rem_now < n then
    reset_now = now + counter_wait(p, c, elapsed, w, n - rem_now - 1)
  end
  return room, n - rem_now, rem_now, reset_now, n - rem_after, rem_after,
    now + counter_wait(p, c + k, elapsed, w, n - rem_after - 1),
    room and 0 or now + counter_wait(p, c, elapsed, w, n - k),
    spack('<dddd', w, cb, c + k, p), cb + 2 * w
end

-- Fixed window, in the counter's state: the count of the window `now` is in, refused past `n`,
-- freed at the window's end (the previous count `sp` is carried for the sliding counter's sake).
-- Whole requests: a count the sliding counter started from a gcra debt's share (a fraction) reads
-- rounded up, as the evidence a window starts from does.
local function fixed_window(n, w, k, sb, sc, sp, now)
  local cb = now - now % w
  local c, p = 0, 0
  if sb == cb then
    c, p = max(0, ceil(sc - EPS)), sp
  elseif sb == cb - w then
    p = sc
  end
  local e = cb + w
  local room = c + k <= n
  return room, min(c, n), max(0, n - c), c > 0 and e or now, min(c + k, n), room and n - c - k or 0,
    c + k > 0 and e or now, room and 0 or (k > n and e + w or e),
    spack('<dddd', w, cb, c + k, p), cb + 2 * w
end

-- gcra; `sa`, `sd`, `sn` the stored time of the last change, the debt then and the limit it was
-- counted with. A debt is requests times their interval: under another limit it stands for the
-- same number of requests, each at the new interval (so a lowered limit is no fresh start).
local function gcra_window(n, w, k, sa, sd, sn, now)
  local interval = w / n
  local debt = 0
  if sa then
    debt = max(0, sd - (now - sa))
    if sn and sn ~= n then
      debt = debt * sn / n
    end
  end
  local after = debt + k * interval
  local rem_now = max(0, floor((w - debt) / interval + EPS))
  local rem_after = max(0, floor((w - after) / interval + EPS))
  local room = after <= w + EPS_US
  local reset_now = now
  if rem_now < n then
    reset_now = now + ceil_us(debt - w + (rem_now + 1) * interval)
  end
  return room, n - rem_now, rem_now, reset_now, n - rem_after, rem_after,
    now + ceil_us(after - w + (rem_after + 1) * interval), room and 0 or now + ceil_us(after - w),
    spack('<dddd', w, now, after, n), now + after
end
