-- Changes fields of an existing user; never creates one (a deleted user stays deleted).
-- KEYS[1]  the user hash {u:<id>}:user
-- ARGV     field/value pairs
-- Reply    1 changed · 0 no such user
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
if #ARGV > 0 then
  redis.call('HSET', KEYS[1], unpack(ARGV))
end
return 1
