-- Shared functions, prepended by the loader to every script in this folder.

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

-- Sliding-window log. Counts the request (id `member`) when the window has room.
-- Returns allowed (1|0), used, oldest_us, free_at_us: free_at_us is the entry whose departure lets
-- the next request in (the oldest, unless the limit was lowered below the count).
local function window_hit(key, limit, window_us, member, now)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', int(now - window_us))
  local used = redis.call('ZCARD', key)
  local allowed = 0
  if used < limit then
    redis.call('ZADD', key, int(now), member)
    redis.call('PEXPIRE', key, int(math.ceil(window_us / 1000)))
    used = used + 1
    allowed = 1
  end
  if used == 0 then
    return allowed, 0, now, now
  end
  local oldest = tonumber(redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')[2])
  local free_at = oldest
  if allowed == 0 and used > limit then
    free_at = tonumber(redis.call('ZRANGE', key, used - limit, used - limit, 'WITHSCORES')[2])
  end
  return allowed, used, oldest, free_at
end

-- Validates a session and renews its idle lifetime. A session is valid while its hash exists,
-- its absolute expiry is ahead and the user's index still lists it (revocation removes it there).
-- The renewal (two writes) is skipped while the last one is younger than a tenth of the idle
-- lifetime (at most 1 s): a busy session costs reads only, and expires at most that much early.
-- Returns status (1 ok, 0 no session, -1 user missing or disabled) and the user's tier.
local function session_touch(session_key, index_key, user_key, sid, idle_ms, now_ms)
  local s = redis.call('HMGET', session_key, 'exp', 'last')
  local exp = tonumber(s[1])
  if not exp or exp <= now_ms or not redis.call('ZSCORE', index_key, sid) then
    redis.call('DEL', session_key)
    redis.call('ZREM', index_key, sid)
    return 0, false
  end
  local user = redis.call('HMGET', user_key, 'tier', 'disabled')
  if not user[1] or user[2] == '1' then
    return -1, false
  end
  if now_ms - (tonumber(s[2]) or 0) >= math.min(1000, idle_ms / 10) then
    redis.call('HSET', session_key, 'last', int(now_ms))
    redis.call('PEXPIRE', session_key, int(math.min(idle_ms, exp - now_ms)))
  end
  return 1, user[1]
end
