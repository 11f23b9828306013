-- Includes: prelude session
-- Revokes every session of a user at once: deletes each session the index lists, and the index.
-- KEYS[1]  the user's session index
-- Reply    how many sessions still existed (index entries of sessions that expired by themselves
--          are not devices that were logged out)
local sids = redis.call('ZRANGE', KEYS[1], 0, -1)
local revoked = 0
for i = 1, #sids do
  revoked = revoked + redis.call('DEL', session_key_of(KEYS[1], sids[i]))
end
redis.call('DEL', KEYS[1])
return revoked
