-- One process's heartbeat on the invalidations: it stays listed as an instance whose cache an
-- announcement must reach (until ARGV[2] ms from now, by Redis's clock), then its beat goes to its
-- own channel with the count of announcements sent so far. All in one step, so that a process that
-- hears its beat is listed, and has heard every announcement the count includes (announce-2.lua
-- runs on the same node: its messages come first) or knows that it missed one.
-- KEYS[1]  the instances' sorted set (member: an instance's id, score: when its listing ends, ms)
-- KEYS[2]  the count of announcements sent on the sync channel (see announce-2.lua)
-- ARGV[1]  this instance's id; ARGV[2] how long the listing lasts (ms); ARGV[3] its own channel;
-- ARGV[4]  the time the beat was sent, by the process's clock; the beat is "<ARGV[4]> <count>"
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
redis.call('PEXPIREAT', KEYS[2], last[2])
redis.call('PUBLISH', ARGV[3], ARGV[4] .. ' ' .. (redis.call('GET', KEYS[2]) or '0'))
return 1
