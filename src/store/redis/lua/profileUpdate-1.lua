-- Includes: prelude
-- Changes a profile hash (an API key's, or a provider subject's) in one step, so that a check never
-- reads half a change, and never brings a deleted API key back.
-- KEYS[1]  the profile hash: {k:<id>}:key or {x:<hash>}:p
-- ARGV[1]  "1": make it if missing (a provider subject's); "0": change an existing one only (a key's)
-- then     field, value pairs; an empty value removes its field
-- Reply    1 changed · 0 no such key
if ARGV[1] == '0' and redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
for i = 2, #ARGV, 2 do
  if ARGV[i + 1] == '' then
    redis.call('HDEL', KEYS[1], ARGV[i])
  else
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
  end
end
return 1
