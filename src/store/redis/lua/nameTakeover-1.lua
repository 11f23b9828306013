-- Moves a username index entry from one user id to another, only if it still holds the first: a
-- compare-and-set, so that of two creations taking over one abandoned name exactly one succeeds.
-- KEYS[1]  the username's index key
-- ARGV[1]  the id the entry must still hold
-- ARGV[2]  the new id
-- Reply    1 when the entry now holds ARGV[2], 0 when it held anything else (left unchanged)
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('SET', KEYS[1], ARGV[2])
return 1
