-- One process's heartbeat on the invalidations: it stays listed as an instance whose cache an
-- announcement must reach (until ARGV[2] ms from now, by Redis's clock), then its beat goes to its
-- own channel. Both in one step, so that a process that hears its beat is listed.
-- KEYS[1]  the instances' sorted set (member: an instance's id, score: when its listing ends, ms)
-- ARGV[1]  this instance's id; ARGV[2] how long the listing lasts (ms); ARGV[3] its own channel;
-- ARGV[4]  the beat (the time it was sent, by the process's clock)
-- Reply    1
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
-- The set lasts as long as its longest listing, not this one's: instances with another
-- REDIS_TIMEOUT_MS list themselves for longer, and must not drop off when a shorter one beats last.
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[1], last[2])
redis.call('PUBLISH', ARGV[3], ARGV[4])
return 1
