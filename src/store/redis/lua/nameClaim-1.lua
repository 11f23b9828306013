-- Includes: prelude
-- Claims a username for a creation in progress: a lease that expires unless nameConfirm makes it
-- permanent, so that a creation which dies half-way frees the name by itself and a concurrent
-- creation never mistakes a claim in progress for an abandoned one.
-- KEYS[1]  the username's index key {n:<hex>}:uid
-- ARGV[1]  the creating user's id
-- ARGV[2]  the lease in ms
-- Reply    {1} claimed, or already this id's (a fixed id written again; left as it is) ·
--          {0} another creation's claim in progress · {2, owner} a permanent claim of another id
local owner = redis.call('GET', KEYS[1])
if owner == false then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return {1}
end
if owner == ARGV[1] then
  return {1}
end
if redis.call('PTTL', KEYS[1]) >= 0 then
  return {0}
end
return {2, owner}
