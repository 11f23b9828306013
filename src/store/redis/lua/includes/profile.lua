-- Subjects without a session as a check reads them: an API key's hash ({k:<id>}:key) or a provider
-- subject's profile ({x:<hash>}:p, absent until an admin sets something), in the call's slot.
-- Needs prelude.lua.

-- `proof`: a letter, then its value. PROOF_KEY (or PROOF_KEY_USED, which also writes the key's last
-- use): the key's SHA-256, refused (SESSION_GONE) unless it is the stored one, which a deleted key
-- has not; then, when the check refuses some users (the demo users, in production), " <id> <id> ":
-- a key that acts for one is refused as a blocked one, before anything is counted (its user is
-- known only here). PROOF_SUBJECT: the tier the token states, used when the admin set none.
-- `field` is the layer's record field "r:<category>". Returns SESSION_VALID, the tier, the
-- subject's own windows of the category (or nil) and the key's user (or nil); SESSION_GONE; or
-- SESSION_USER_INACTIVE (blocked, or a refused user's). A hash comparison in Lua is no timing oracle
-- worth having: it leaks bits of a SHA-256 of a 256-bit secret, not of the secret.
local function profile_touch(profile_key, proof, field, now_ms, dry)
  local kind = byte(proof, 1)
  local v = call('HMGET', profile_key, 'h', 'tier', 'blocked', 'o:' .. sub(field, 3), 'uid')
  local tier = v[2]
  local refused
  if kind == PROOF_SUBJECT then
    tier = tier or sub(proof, 2)
  else
    refused = find(proof, ' ', 2, true)
    if v[1] ~= sub(proof, 2, refused and refused - 1 or -1) then
      return SESSION_GONE
    end
  end
  if v[3] == '1' or (refused and v[5] and find(proof, ' ' .. v[5] .. ' ', refused, true)) then
    return SESSION_USER_INACTIVE
  end
  if kind == PROOF_KEY_USED and not dry then
    call('HSET', profile_key, 'used', int(now_ms))
  end
  return SESSION_VALID, tier or '', v[4] or nil, v[5] or nil
end
