-- Includes: prelude session
-- Deletes a user hash with every session the user's index lists, and the index, so that no check
-- accepts them from this step on. Deleted rather than marked: a login that verified the password
-- before this step may have created a session after the deletion revoked the others, and a marked
-- session would come back to life for a new user given the same id (USERS_FILE's fixed ids) at its
-- first change (userUpdate rewrites every listed session's copy of its user).
-- KEYS[1]  the user hash {u:<id>}:user; KEYS[2] the user's session index
-- Reply    1 deleted · 0 no such user
if redis.call('DEL', KEYS[1]) == 0 then
  return 0
end
for _, sid in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
  redis.call('DEL', session_key_of(KEYS[2], sid))
end
redis.call('DEL', KEYS[2])
return 1
