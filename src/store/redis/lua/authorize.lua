-- The check of an authenticated request in one call, atomically: the IP layer (when the policy has
-- one and its keys may share the call), the session, the user's current tier (or the user's own
-- rule) and the user's windows; the request is counted in every layer or in none.
-- KEYS[1]  the session hash                   {u:<id>}:s:<sid> (field v: what the check needs of
--          the session and its user, see session_view)
-- KEYS[2]  the user's session index           {u:<id>}:sessions (read only for a session from
--          before v, and cleaned of a session found gone)
-- KEYS[3]  the user hash                      {u:<id>}:user (r:<category> counter and gcra state;
--          tier, disabled and o:<category> own windows for a session from before v)
-- KEYS[4]  with an IP layer: the client address's record hash {ip:<addr>}:r
-- then     sliding-log lists, one per layer: ARGV[7] of them (1) the IP layer's, then the user's
--          list of the category (always sent: a log counts in it, a counter or gcra reads it
--          when a change of algorithm left one)
-- ARGV[1]  session id
-- ARGV[2]  session idle lifetime in ms
-- ARGV[3]  the route's category
-- ARGV[4]  the category's rule per tier (a tier table, see rule_of_tier)
-- ARGV[5]  "1" count the request, "2" count it and expect room (the caller's last answer for the
--          window had room left: a sliding log adds first, see log_push), "0" decide only (a dry run)
-- ARGV[6]  the IP layer's rule, or absent (or "") without one
-- ARGV[7]  how many lists are the IP layer's (with ARGV[6]): 1
-- ARGV[8]  "1" when the IP layer is in shadow mode: a full one refuses nothing, the session and the
--          user's layer decide and the request counts in the user's layer (with ARGV[6])
-- ARGV[9]  "now" in µs when a test pins the clock; absent (or "") for Redis TIME
-- Reply    the answer (see pack_answer; layer 1 is the IP layer when there is one), then a double:
--          the session's absolute expiry (ms), then "<tier>\n<own windows>"; the tier is empty when
--          the (enforced) IP layer refused before the session was looked at. A full shadow IP layer
--          leaves the answer not allowed, describing it, when the user's layer had room. For the usual check (the tier's
--          rule of one window, no IP layer, no own windows) the usual answer instead (see
--          pack_usual), the session's expiry and the tier.
--          {-1} no valid session · {-2} user missing or disabled · {-3, tier} the tier has no rule
local now = clock_us(ARGV[9])
local mode = ARGV[5]
local dry = mode ~= '1' and mode ~= '2'
local ip_spec = ARGV[6]
if ip_spec == '' then
  ip_spec = nil
end
local category = ARGV[3]
local own_field, field, needle = fields_of(category)
local G, ip
local first = 4
if ip_spec then
  G = general()
  ip = G.layer_at(ip_spec, 1)
  local state
  if ip.algo ~= 1 then
    local v = call('HMGET', KEYS[4], 'x', 'r:ip')
    ip.deadline, state = tonum(v[1]), v[2] or nil
  end
  G.evaluate(ip, KEYS, 5, state, now, dry, KEYS[4], 'r:ip')
  ip.shadow = ARGV[8] == '1'
  -- The IP layer comes before identity: a full one refuses without looking at the session, unless
  -- in shadow mode, where it refuses nothing and the session must be checked as ever.
  if not ip.room and not ip.shadow then
    return G.answer({ip}, false, now) .. spack('<d', 0)
  end
  first = 5 + tonum(ARGV[7])
end
local status, tier, own, exp, read, state = session_touch(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2],
  floor(now / 1000), dry, needle, own_field, field)
if status ~= 1 then
  return {status - 1}
end
local rules = ARGV[4]
local pos = rule_of_tier(rules, tier)
if not pos and not own then
  return {-3, tier}
end
if not ip and not own then
  -- The usual check: one layer of one window, decided straight through.
  local algo, n = byte(rules, pos) - 48, byte(rules, pos + 1) - 48
  if n == 1 then
    local reply, usual = single(rules, pos, KEYS[first], KEYS[3], field,
      state_of(algo, read, state, KEYS[3], field), now, dry, mode == '2', exp, tier)
    if usual then
      return reply
    end
  end
end
G = G or general()
local mine
if own then
  -- The user's own windows, counted with the tier's algorithm for the category.
  mine = G.layer_of_text(own, pos and byte(rules, pos) - 48 or 1)
else
  mine = G.layer_at(rules, pos)
end
G.evaluate(mine, KEYS, first, state_of(mine.algo, read, state, KEYS[3], field), now, dry, KEYS[3], field)
local allowed = mine.room
if allowed and not dry then
  if ip and ip.room then
    G.commit(ip, now, KEYS[4], 'r:ip')
    if ip.expires_us then
      extend_record(KEYS[4], ip.deadline, ip.expires_us, ip[10 * ip.n - 8], now)
    end
  end
  G.commit(mine, now, KEYS[3], field)
end
return G.answer(ip and {ip, mine} or {mine}, allowed and (not ip or ip.room), now) .. spack('<d', exp) .. tier .. '\n' .. (own or '')
