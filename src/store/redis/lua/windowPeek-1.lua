-- Reads a sliding window without counting anything.
-- KEYS[1]  the window (see windowHit-1.lua)
-- ARGV[1]  window length in microseconds
-- ARGV[2]  "now" in microseconds when a test pins the clock; "" for Redis TIME
-- Reply    {used, oldest_us, now_us}
local now = clock_us(ARGV[2])
local min = '(' .. int(now - tonumber(ARGV[1]))
local used = redis.call('ZCOUNT', KEYS[1], min, '+inf')
if used == 0 then
  return {0, now, now}
end
local first = redis.call('ZRANGEBYSCORE', KEYS[1], min, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
return {used, tonumber(first[2]), now}
