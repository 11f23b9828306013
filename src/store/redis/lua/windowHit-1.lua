-- Sliding-window log: count a request when the window has room, atomically.
-- KEYS[1]  the window: a sorted set of request ids scored by their time in microseconds
-- ARGV[1]  limit (requests per window)
-- ARGV[2]  window length in microseconds
-- ARGV[3]  this request's id, unique across every tollgate process
-- ARGV[4]  "now" in microseconds when a test pins the clock; "" for Redis TIME
-- Reply    {allowed (1|0), used, oldest_us, now_us, free_at_us}; used counts this request when allowed
local now = clock_us(ARGV[4])
local allowed, used, oldest, free_at = window_hit(KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], now)
return {allowed, used, oldest, now, free_at}
