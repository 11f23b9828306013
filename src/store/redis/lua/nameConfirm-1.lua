-- Includes: prelude
-- Makes a creation's username claim permanent once the user's hash is written.
-- KEYS[1]  the username's index key {n:<hex>}:uid
-- ARGV[1]  the creating user's id
-- Reply    1 the name is this id's for good · 0 another creation holds it (this one lost)
local owner = redis.call('GET', KEYS[1])
if owner == ARGV[1] then
  redis.call('PERSIST', KEYS[1])
  return 1
end
if owner == false then
  -- The lease ran out while the steps were slow and no one claimed the name meanwhile.
  redis.call('SET', KEYS[1], ARGV[1])
  return 1
end
return 0
