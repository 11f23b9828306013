-- Revokes every session of a user at once by emptying the index that validity depends on.
-- KEYS[1]  the user's session index
-- Reply    the revoked session ids; the caller deletes their hashes
local sids = redis.call('ZRANGE', KEYS[1], 0, -1)
redis.call('DEL', KEYS[1])
return sids
