-- Announces a subject to every instance: as a bare subject on the channel that every build hears,
-- and, when instances are listed, with the announcer's id and number on the sync channel, which each
-- listed instance acknowledges once it has dropped its refusals of the subject. The list is read in
-- the same step: an instance listed only later turns its cache on only then, so that whatever it
-- caches was read after the change.
-- KEYS[1]  the instances' sorted set (see peerBeat-1.lua)
-- ARGV[1]  the channel; ARGV[2] the subject; ARGV[3] the sync channel; ARGV[4] "<announcer id> <number> <subject>"
-- Reply    the ids of the instances listed now
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local listed = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf')
redis.call('PUBLISH', ARGV[1], ARGV[2])
if #listed > 0 then
  redis.call('PUBLISH', ARGV[3], ARGV[4])
end
return listed
