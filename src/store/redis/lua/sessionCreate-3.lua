-- Includes: prelude session
-- Creates a session and enforces the per-user cap atomically, evicting (deleting) the oldest
-- sessions; refuses when the user was disabled, deleted or given a new password after the login
-- checked it. The session carries what a check needs of its user (see session_view).
-- KEYS[1]  the new session hash; KEYS[2] the user's session index (sid -> created ms); KEYS[3] the user hash
-- ARGV[1]  session id; ARGV[2] idle lifetime ms; ARGV[3] absolute lifetime ms; ARGV[4] max sessions
-- ARGV[5]  the password hash the login verified
-- ARGV[6…] field/value pairs to store (device, ip, user agent)
-- Reply    {-1} refused: the user no longer matches what the login saw
--          {created_ms, evicted sid, …}
local user = redis.call('HGETALL', KEYS[3])
local pw, disabled
for i = 1, #user, 2 do
  if user[i] == 'pw' then
    pw = user[i + 1]
  elseif user[i] == 'disabled' then
    disabled = user[i + 1]
  end
end
if pw ~= ARGV[5] or disabled == '1' then
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
    redis.call('DEL', session_key_of(KEYS[2], popped[i]))
  end
end
local created, exp = int(now), int(now + tonumber(ARGV[3]))
-- Field last too, for processes of an older build during a rolling upgrade (they read it, not v).
local fields = {'created', created, 'last', created, 'exp', exp, 'v', session_view(created, exp, user)}
for i = 6, #ARGV do
  fields[#fields + 1] = ARGV[i]
end
redis.call('HSET', KEYS[1], unpack(fields))
redis.call('PEXPIRE', KEYS[1], int(math.min(tonumber(ARGV[2]), tonumber(ARGV[3]))))
redis.call('ZADD', KEYS[2], int(now), ARGV[1])
-- The index lives as long as its longest-lived session, never shorter: a session created under a
-- longer SESSION_MAX_AGE_SECONDS than today's must stay listable and revocable until it ends.
local index_ms = tonumber(ARGV[3])
if redis.call('PTTL', KEYS[2]) < index_ms then
  redis.call('PEXPIRE', KEYS[2], int(index_ms))
end
return reply
