-- Changes fields of an existing user; never creates one (a deleted user stays deleted).
-- KEYS[1]  the user hash {u:<id>}:user
-- ARGV     field/value pairs; a field with an empty value is removed
-- Reply    1 changed · 0 no such user
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
for i = 1, #ARGV, 2 do
  if ARGV[i + 1] == '' then
    redis.call('HDEL', KEYS[1], ARGV[i])
  else
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
  end
end
return 1
