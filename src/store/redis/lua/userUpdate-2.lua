-- Includes: prelude session
-- Changes fields of an existing user; never creates one (a deleted user stays deleted). A new
-- password (field pw) deletes every session of the user and the index in the same step, so that no
-- session from before it outlives it, whatever fails after; otherwise, when a field that sessions
-- carry changes (see session_view), every live session's copy is rewritten in the same step, so
-- that a check sees a new tier, a disable or new own windows at once.
-- KEYS[1]  the user hash {u:<id>}:user; KEYS[2] the user's session index
-- ARGV     field/value pairs; a field with an empty value is removed
-- Reply    1 changed · 0 no such user
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
local seen, password = false, false
for i = 1, #ARGV, 2 do
  if ARGV[i + 1] == '' then
    redis.call('HDEL', KEYS[1], ARGV[i])
  else
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
  end
  seen = seen or carried(ARGV[i])
  password = password or ARGV[i] == 'pw'
end
if password then
  for _, sid in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
    redis.call('DEL', session_key_of(KEYS[2], sid))
  end
  redis.call('DEL', KEYS[2])
elseif seen then
  local user = redis.call('HGETALL', KEYS[1])
  for _, sid in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
    local key = session_key_of(KEYS[2], sid)
    -- Only live sessions of this kind: HSET on an expired one would bring it back without a TTL.
    local v = redis.call('HGET', key, 'v')
    if v then
      redis.call('HSET', key, 'v', session_view_again(v, user))
    end
  end
end
return 1
