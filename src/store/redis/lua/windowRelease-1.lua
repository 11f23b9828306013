-- Takes back `k` hits that an INCRBY counted in a reference window (src/store/redis/window-counts.ts)
-- for a rate limit call refused without its answer. A key already gone (expired past its window) is
-- left gone: DECRBY would make it again, below zero and without an expiry.
-- KEYS[1]  the window's counter
-- ARGV[1]  k
-- Reply    the count left, or nil when the key is gone
if redis.call('EXISTS', KEYS[1]) == 0 then
  return nil
end
return redis.call('DECRBY', KEYS[1], ARGV[1])
