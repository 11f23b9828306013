-- Includes: prelude session
-- Validates a session and renews it, for the public API (no rate limiting here).
-- KEYS[1]  the session hash; KEYS[2] the user's session index; KEYS[3] the user hash
-- ARGV[1]  session id; ARGV[2] idle lifetime in ms; ARGV[3] pinned "now" in microseconds or ""
-- Reply    {SESSION_VALID, tier} · {SESSION_GONE} · {SESSION_USER_INACTIVE} (user missing or disabled)
local now = clock_us(ARGV[3])
local status, tier = session_touch(KEYS[1], KEYS[2], ARGV[1], ARGV[2], floor(now / 1000), false)
if status ~= SESSION_VALID then
  return {status}
end
return {status, tier}
