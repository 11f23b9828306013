-- Sliding-window log: count a request when the window has room, atomically.
-- KEYS[1]  the window: a sorted set of request ids scored by their time in microseconds
-- ARGV[1]  limit (requests per window)
-- ARGV[2]  window length in microseconds
-- ARGV[3]  this request's id, unique across every tollgate process
-- ARGV[4]  optional: "now" in microseconds (tests only); otherwise Redis TIME, one clock for all
-- Reply    {allowed (1|0), used, oldest_us, now_us, free_at_us}
--          used counts this request when allowed; free_at_us is the entry whose departure
--          lets the next request in (equal to oldest_us unless the limit was lowered).
local now
if ARGV[4] and ARGV[4] ~= '' then
  now = tonumber(ARGV[4])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local key = KEYS[1]

-- Numbers go to Redis as %d strings: Lua's default formatting would round microsecond times.
redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', now - window))
local used = redis.call('ZCARD', key)
local allowed = 0
if used < limit then
  redis.call('ZADD', key, string.format('%d', now), ARGV[3])
  redis.call('PEXPIRE', key, string.format('%d', math.ceil(window / 1000)))
  used = used + 1
  allowed = 1
end
if used == 0 then
  return {allowed, 0, now, now, now}
end
local oldest = tonumber(redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')[2])
local free_at = oldest
if allowed == 0 and used > limit then
  free_at = tonumber(redis.call('ZRANGE', key, used - limit, used - limit, 'WITHSCORES')[2])
end
return {allowed, used, oldest, now, free_at}
