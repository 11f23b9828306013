-- Includes: prelude session
-- Deletes a user hash, and marks every live session of the user as a deleted user's (see
-- session_view), so that no check accepts them from this step on; revoking them deletes them.
-- KEYS[1]  the user hash {u:<id>}:user; KEYS[2] the user's session index
-- Reply    1 deleted · 0 no such user
if redis.call('DEL', KEYS[1]) == 0 then
  return 0
end
for _, sid in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
  local key = session_key_of(KEYS[2], sid)
  local v = redis.call('HGET', key, 'v')
  if v then
    redis.call('HSET', key, 'v', session_view_again(v, {}))
  end
end
return 1
