-- The usual check, straight through: one layer of one window whose state is the plain one (a
-- sliding log's list, or a counter's or gcra's one entry), decided without building a layer table.
-- Needs prelude.lua, window.lua and layer.lua (extend_log). Kept because it measured 15% fewer
-- Redis instructions per allowed sliding-log check with a session than the general path
-- (callgrind, 2026-12-04: 100.7k against 118.3k, both before the memo); the general path answers
-- everything it does not.

-- A rule of one window ("<algo>:<limit>/<µs>"): its algorithm, limit and length; nil for several.
-- Parsed once per library (see prelude.lua's memo): rule texts are the same few on every call.
local function one_window(spec)
  local parsed = memo[spec] or recall(spec)
  if not parsed then
    local slash = find(spec, '/', 3, true)
    if slash and not find(spec, ',', slash, true) then
      parsed = {byte(spec, 1) - 48, tonum(sub(spec, 3, slash - 1)), tonum(sub(spec, slash + 1))}
    else
      parsed = {}
    end
    remember(spec, parsed)
  end
  return parsed[1], parsed[2], parsed[3]
end

-- A user's layer in one argument: its record field ("r:<category>"), then the category's rule per
-- tier (";<tier>=<rule>" per tier). Read once per library and argument (see prelude.lua's memo):
-- [1] the field, then per tier as rule_of_tier found it.
local function tier_table(arg)
  local t = memo[arg] or recall(arg)
  if not t then
    local first = find(arg, ';', 1, true)
    t = remember(arg, {first and sub(arg, 1, first - 1) or arg})
  end
  return t
end

-- The rule of `tier` in a tier table (tier_table's, of the argument `arg`), or nil.
local function rule_of_tier(t, arg, tier)
  local spec = t[tier]
  if spec == nil then
    local found = find(arg, ';' .. tier .. '=', 1, true)
    spec = found and sub(arg, found + #tier + 2, (find(arg, ';', found + 1, true) or 0) - 1) or false
    t[tier] = spec
  end
  return spec or nil
end

-- A sliding log's count for a list whose last count left room (the library's guess, see prelude.lua's
-- memo; shared by every tollgate on this Redis): drops what left the window, adds the request and
-- takes the length RPUSH answers, and takes the request back (RPOP) when there was no room after
-- all. One read less than log_window and a push. Returns as log_window does; nil when the list
-- does not exist while the record holds another algorithm's state (the general path seeds it).
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

-- Decides and, unless dry, counts `k` requests in the window `n`/`w` of `key` (a log) or of field
-- `field` of `record` (counter, gcra; `state` its value). Returns whether it had room, and the
-- window's used, reset (µs) and retry (µs; 0: room) as the reply tells them (counted when room and
-- k > 0); then until when a written counter or gcra state matters. Returns nil when the state is
-- not the plain one (a log seeded from another algorithm, entries of other lengths): the general
-- path then counts what they show.
local function single(algo, n, w, k, key, record, field, state, now, dry, each)
  local room, used, rem, reset, used_after, rem_after, reset_after, retry, packed, until_us
  -- In mode each a fixed window counts a refused hit too, as envoyproxy/ratelimit's INCRBY does.
  local counts_refused = each and algo == ALGO_FIXED_WINDOW
  if algo == ALGO_SLIDING_LOG then
    local seen = memo[key] or recall(key)
    if k == 1 and not dry and seen and seen > 0 then
      room, used, rem, reset, used_after, rem_after, reset_after, retry = log_push(key, n, w, now, record, field)
      if room == nil then
        return nil
      end
      if room then
        extend_log(key, w, now, used_after == 1)
      end
      log_room(key, room and rem_after > 0)
    else
      local head = call('LINDEX', key, '0')
      if not head then
        if call('HEXISTS', record, field) == 1 then
          return nil
        end
        room = k <= n
        used, reset, used_after, rem_after = 0, now, k, n - k
        reset_after, retry = k > 0 and now + w or now, room and 0 or now + w
      else
        room, used, rem, reset, used_after, rem_after, reset_after, retry =
          log_window(key, n, w, k, now, dry, false, head + 0)
      end
      if room and k > 0 and not dry then
        local stamp, length = int(now), nil
        if k == 1 then
          length = call('RPUSH', key, stamp)
        else
          local stamps = {}
          for i = 1, k do
            stamps[i] = stamp
          end
          length = call('RPUSH', key, unpack(stamps))
        end
        extend_log(key, w, now, length == k)
        -- What the next count may guess (extend_log made the list's memo when it set an expiry).
        log_room(key, rem_after > 0)
      elseif not dry and seen then
        log_room(key, false)
      end
    end
  else
    local letter = (algo == ALGO_SLIDING_COUNTER or algo == ALGO_FIXED_WINDOW) and 'C' or 'Q'
    local a, b, c
    if state then
      if #state ~= 33 or sub(state, 1, 1) ~= letter then
        return nil
      end
      local sw
      sw, a, b, c = sunpack('<dddd', state, 2)
      if sw ~= w then
        return nil
      end
    elseif call('EXISTS', key) == 1 then
      -- A sliding log's list of the category: the general path counts what it shows.
      return nil
    end
    if algo == ALGO_SLIDING_COUNTER then
      room, used, rem, reset, used_after, rem_after, reset_after, retry, packed, until_us =
        counter_window(n, w, k, a, b, c, now)
    elseif algo == ALGO_FIXED_WINDOW then
      room, used, rem, reset, used_after, rem_after, reset_after, retry, packed, until_us =
        fixed_window(n, w, k, a, b, c, now)
    else
      room, used, rem, reset, used_after, rem_after, reset_after, retry, packed, until_us =
        gcra_window(n, w, k, a, b, c, now)
    end
    if (room or counts_refused) and k > 0 and not dry then
      call('HSET', record, field, letter .. packed)
    end
  end
  if room and k > 0 then
    return true, used_after, reset_after, 0, until_us
  end
  if counts_refused and k > 0 then
    return false, used_after, reset_after, retry, until_us
  end
  return room, used, reset, retry, until_us
end
