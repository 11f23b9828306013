-- Includes: prelude
-- Moves a permanent username claim whose user no longer exists (a deletion that failed half-way,
-- or a creation by an older tollgate) to a new creation, as a lease like nameClaim's. A
-- compare-and-set: of two creations taking over one abandoned name exactly one succeeds.
-- KEYS[1]  the username's index key
-- ARGV[1]  the id the entry must still hold, permanently
-- ARGV[2]  the new id
-- ARGV[3]  the new claim's lease in ms
-- Reply    1 when the entry now holds ARGV[2], 0 when it held anything else (left unchanged)
if redis.call('GET', KEYS[1]) ~= ARGV[1] or redis.call('PTTL', KEYS[1]) ~= -1 then
  return 0
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1
