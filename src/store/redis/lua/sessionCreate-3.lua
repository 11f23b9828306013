-- Creates a session and enforces the per-user cap atomically, evicting the oldest sessions; refuses
-- when the user was disabled, deleted or given a new password after the login checked it.
-- KEYS[1]  the new session hash; KEYS[2] the user's session index (sid -> created ms); KEYS[3] the user hash
-- ARGV[1]  session id; ARGV[2] idle lifetime ms; ARGV[3] absolute lifetime ms; ARGV[4] max sessions
-- ARGV[5]  the password hash the login verified
-- ARGV[6…] field/value pairs to store (device, ip, user agent)
-- Reply    {-1} refused: the user no longer matches what the login saw
--          {created_ms, evicted sid, …}: the caller deletes the evicted session hashes (the index
--          no longer lists them, so they are already invalid)
local user = redis.call('HMGET', KEYS[3], 'pw', 'disabled')
if user[1] ~= ARGV[5] or user[2] == '1' then
  return {-1}
end
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
for i = 6, #ARGV do
  fields[#fields + 1] = ARGV[i]
end
redis.call('HSET', KEYS[1], unpack(fields))
redis.call('PEXPIRE', KEYS[1], int(math.min(tonumber(ARGV[2]), tonumber(ARGV[3]))))
redis.call('ZADD', KEYS[2], int(now), ARGV[1])
redis.call('PEXPIRE', KEYS[2], int(tonumber(ARGV[3])))
return reply
