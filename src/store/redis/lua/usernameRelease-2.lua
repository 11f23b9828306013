-- Includes: prelude
-- Frees a username whose user was deleted, and remembers the deletion for USERS_FILE unless told not to.
-- KEYS[1]  the username's id key {n:<hex>}:uid; KEYS[2] its deletion mark {n:<hex>}:gone
-- ARGV[1]  the deleted user's id (the name is freed only if it still points there)
-- ARGV[2]  1: remember the deletion (an admin's); 0: not (USERS_FILE dropped the user)
-- Reply    1 freed · 0 the name belongs to someone else now
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
if ARGV[2] == '1' then
  redis.call('SET', KEYS[2], ARGV[1])
end
return 1
