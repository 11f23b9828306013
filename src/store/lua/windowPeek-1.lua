-- Reads a sliding window without counting anything.
-- KEYS[1]  the window (see windowHit-1.lua)
-- ARGV[1]  window length in microseconds
-- ARGV[2]  optional: "now" in microseconds (tests only); otherwise Redis TIME
-- Reply    {used, oldest_us, now_us}
local now
if ARGV[2] and ARGV[2] ~= '' then
  now = tonumber(ARGV[2])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local min = '(' .. string.format('%d', now - tonumber(ARGV[1]))
local used = redis.call('ZCOUNT', KEYS[1], min, '+inf')
if used == 0 then
  return {0, now, now}
end
local first = redis.call('ZRANGEBYSCORE', KEYS[1], min, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
return {used, tonumber(first[2]), now}
