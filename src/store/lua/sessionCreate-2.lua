-- Creates a session and enforces the per-user cap atomically, evicting the oldest sessions.
-- KEYS[1]  the new session hash; KEYS[2] the user's session index (sid -> created ms)
-- ARGV[1]  session id; ARGV[2] idle lifetime ms; ARGV[3] absolute lifetime ms; ARGV[4] max sessions
-- ARGV[5…] field/value pairs to store (device, ip, user agent)
-- Reply    {created_ms, evicted sid, …}: the caller deletes the evicted session hashes (the index
--          no longer lists them, so they are already invalid)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local max = tonumber(ARGV[4])
local reply = {now}
local excess = redis.call('ZCARD', KEYS[2]) - (max - 1)
if excess > 0 then
  local popped = redis.call('ZPOPMIN', KEYS[2], excess)
  for i = 1, #popped, 2 do
    reply[#reply + 1] = popped[i]
  end
end
local fields = {'created', int(now), 'last', int(now), 'exp', int(now + tonumber(ARGV[3]))}
for i = 5, #ARGV do
  fields[#fields + 1] = ARGV[i]
end
redis.call('HSET', KEYS[1], unpack(fields))
redis.call('PEXPIRE', KEYS[1], int(math.min(tonumber(ARGV[2]), tonumber(ARGV[3]))))
redis.call('ZADD', KEYS[2], int(now), ARGV[1])
redis.call('PEXPIRE', KEYS[2], int(tonumber(ARGV[3])))
return reply
