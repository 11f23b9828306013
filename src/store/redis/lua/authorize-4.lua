-- The check of an authenticated request in one call: session, current tier, sliding window.
-- KEYS[1]  the session hash                  {u:<id>}:s:<sid>
-- KEYS[2]  the user's session index          {u:<id>}:sessions (sorted set: sid -> created ms)
-- KEYS[3]  the user hash                     {u:<id>}:user
-- KEYS[4]  the user's window for the category {u:<id>}:w:<category>
-- ARGV[1]  session id
-- ARGV[2]  session idle lifetime in ms
-- ARGV[3]  this request's id for the window log
-- ARGV[4]  "now" in microseconds when a test pins the clock; "" for Redis TIME
-- ARGV[5]  the category's limits per tier, one string built once per policy:
--          ";<tier>=<limit>/<window in microseconds>" repeated, e.g. ";free=20/3600000000;pro=200/3600000000"
-- Reply    {-1} no valid session · {-2} user missing or disabled · {-3, tier} tier has no limit
--          {allowed (1|0), used, oldest_us, now_us, free_at_us, tier, limit, window_us}
local now = clock_us(ARGV[4])
local status, tier = session_touch(KEYS[1], KEYS[2], KEYS[3], ARGV[1], tonumber(ARGV[2]), math.floor(now / 1000))
if status ~= 1 then
  return {status - 1}
end
local at = string.find(ARGV[5], ';' .. tier .. '=', 1, true)
if not at then
  return {-3, tier}
end
local limit, window_us = string.match(ARGV[5], '^(%d+)/(%d+)', at + #tier + 2)
limit = tonumber(limit)
window_us = tonumber(window_us)
local allowed, used, oldest, free_at = window_hit(KEYS[4], limit, window_us, ARGV[3], now)
return {allowed, used, oldest, now, free_at, tier, limit, window_us}
