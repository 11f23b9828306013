-- Announces a subject to every instance: as a bare subject on the channel that every build hears,
-- and, when instances are listed, with the announcer's id and number on the sync channel, which each
-- listed instance acknowledges once it has dropped its refusals of the subject. The list is read in
-- the same step: an instance listed only later turns its cache on only then, so that whatever it
-- caches was read after the change. Each sync message is counted, and carries its count as
-- "<number>:<count>" (builds that do not read it echo it back whole in their acknowledgement), so
-- that an instance that misses one while its subscription stays up (a Cluster bus link dropped with
-- the message in it) finds out from the next one, or from its heartbeat (peerBeat-2.lua).
-- KEYS[1]  the instances' sorted set (see peerBeat-2.lua); KEYS[2] the count of sync messages
-- ARGV[1]  the channel; ARGV[2] the subject; ARGV[3] the sync channel; ARGV[4] "<announcer id> <number>"
-- Reply    the ids of the instances listed now
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local listed = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf')
redis.call('PUBLISH', ARGV[1], ARGV[2])
if #listed > 0 then
  local count = redis.call('INCR', KEYS[2])
  -- As long as the list (peerBeat-2.lua renews both): a count that ends with the last instance
  -- starts again at 1, and an instance still listening only empties its cache once more.
  redis.call('PEXPIRE', KEYS[2], math.max(redis.call('PTTL', KEYS[1]), 1))
  redis.call('PUBLISH', ARGV[3], ARGV[4] .. ':' .. count .. ' ' .. ARGV[2])
end
return listed
