-- Sessions as a check reads them: what a check needs of a session and its user lives in one field
-- (v) of the session hash. Needs prelude.lua.

-- A session of the user whose session index is `index_key`: the sessions' keys share its prefix.
local function session_key_of(index_key, sid)
  return sub(index_key, 1, -9) .. 's:' .. sid
end

-- The session id in a session's key, the inverse of session_key_of: "<prefix>sessions" is the
-- index, "<prefix>s:<sid>" the session.
local function sid_of(session_key, index_key)
  return sub(session_key, #index_key - 5)
end

-- The user fields that sessions carry a copy of: the tier, the disabled flag, the own windows.
local function carried(field)
  return field == 'tier' or field == 'disabled' or sub(field, 1, 2) == 'o:'
end

-- v, at fixed places so that it parses cheaply: the last renewal and the absolute expiry (ms, 13
-- digits each), one character for the tier's length (48 + length), the tier ("!" for a disabled
-- user, or one without a hash), then "\n<category>=<own windows>" per category where the user has
-- windows of their own. Written at login and rewritten by every change of the user (userUpdate) in
-- the same step, so that a new tier or a disable applies at once; a deletion (userDelete) deletes
-- the sessions with the user. `last` and `exp` are digits;
-- `user` is the user hash as HGETALL gives it (empty: deleted).
local function session_view(last, exp, user)
  local tier, disabled, own = nil, nil, {}
  for i = 1, #user, 2 do
    local f = user[i]
    if f == 'tier' then
      tier = user[i + 1]
    elseif f == 'disabled' then
      disabled = user[i + 1]
    elseif sub(f, 1, 2) == 'o:' then
      own[#own + 1] = '\n' .. sub(f, 3) .. '=' .. user[i + 1]
    end
  end
  if not tier or disabled == '1' then
    tier = '!'
  end
  return format('%013d%013d', last, exp) .. char(48 + #tier) .. tier .. concat(own)
end

-- A session's v rebuilt from the user hash `user`, keeping its renewal time and expiry.
local function session_view_again(v, user)
  return session_view(sub(v, 1, 13), sub(v, 14, 26), user)
end

-- Validates a session and renews its idle lifetime. A session is valid while its hash exists, its
-- absolute expiry is ahead, the user's session index lists it and its user is neither disabled nor
-- deleted; revocation deletes the hash. The index is how logout-all, a password change, a disable
-- and a deletion reach the sessions: one it no longer lists would outlive them all (an evicting
-- maxmemory-policy drops the index, which checks never read, before the sessions they renew), so
-- it is gone, and deleted as such. The renewal (two writes) is skipped while the last one is
-- younger than a tenth of the idle lifetime (at most 1 s), and on a dry run. `sid` is the
-- session's id, or nil to read it from the session's key. `idle_ms` is a string of digits.
-- `field`: the record field "r:<category>" of the category whose own windows to find in v (nil:
-- not needed). Returns SESSION_VALID, the tier, the own windows of the category (or nil) and the
-- session's absolute expiry (ms); SESSION_GONE; or SESSION_USER_INACTIVE (user missing or disabled).
local function session_touch(session_key, index_key, sid, idle_ms, now_ms, dry, field)
  local v = call('HGET', session_key, 'v')
  local exp = v and sub(v, 14, 26) + 0
  sid = sid or sid_of(session_key, index_key)
  if not exp or exp <= now_ms or not call('ZSCORE', index_key, sid) then
    if not dry then
      call('DEL', session_key)
      call('ZREM', index_key, sid)
    end
    return SESSION_GONE
  end
  local ends = 27 + byte(v, 27) - 48
  local tier = sub(v, 28, ends)
  if tier == '!' then
    return SESSION_USER_INACTIVE
  end
  local own
  if field and #v > ends then
    local needle = '\n' .. sub(field, 3) .. '='
    local at = find(v, needle, ends + 1, true)
    if at then
      own = match(v, '^[^\n]*', at + #needle)
    end
  end
  if not dry then
    local since = now_ms - sub(v, 1, 13)
    -- idle_ms (digits) is parsed only when it could matter: under 10 s, its tenth is under 1 s.
    if since >= 1000 or (#idle_ms < 5 and since * 10 >= tonum(idle_ms)) then
      call('HSET', session_key, 'v', format('%013d', now_ms) .. sub(v, 14))
      call('PEXPIRE', session_key, int(min(tonum(idle_ms), exp - now_ms)))
    end
  end
  return SESSION_VALID, tier, own, exp
end
