-- The check of an authenticated request in one call, atomically: the IP layer (when the policy has
-- one and the keys share a server), the session, the user's current tier (or the user's own rule)
-- and the user's windows; the request is counted in every layer or in none.
-- KEYS[1]  the session hash                   {u:<id>}:s:<sid>
-- KEYS[2]  the user's session index           {u:<id>}:sessions (sorted set: sid -> created ms)
-- KEYS[3]  the user hash                      {u:<id>}:user (tier, disabled, o:<category> the user's
--          own rule, r:<category> counter and gcra state)
-- KEYS[4]  the client address's record hash   {ip:<addr>}:r (read only with an IP layer)
-- KEYS[5…] sliding-log lists, one per window: ARGV[7] of them the IP layer's, then the user's
-- ARGV[1]  "now" in µs when a test pins the clock; "" for Redis TIME
-- ARGV[2]  session id
-- ARGV[3]  session idle lifetime in ms
-- ARGV[4]  the route's category
-- ARGV[5]  the category's rule per tier, ";<tier>=<rule>" repeated (rules as in parse_rule)
-- ARGV[6]  the IP layer's rule, or ""
-- ARGV[7]  how many of KEYS[5…] are the IP layer's
-- ARGV[8]  "1" count the request, "0" decide only (a dry run)
-- Reply    {allowed (1|0), layer, window, limit, used, remaining, window_us, reset_us, retry_us,
--          now_us, tier, own_rule, session_expiry_ms}: layer 1 is the IP layer when there is one.
--          {-1} no valid session · {-2} user missing or disabled · {-3, tier} the tier has no rule
--          {-4, n} the user's own rule needs n sliding-log lists, more than KEYS holds
local now = clock_us(ARGV[1])
local dry = ARGV[8] ~= '1'
local layers = {}
local ip_keys = tonumber(ARGV[7])
local ip
if ARGV[6] ~= '' then
  ip = new_layer(parse_rule(ARGV[6], 1))
  local state, deadline
  if ip.rule.algo ~= 'L' then
    local v = redis.call('HMGET', KEYS[4], 'x', 'r:ip')
    deadline, state = tonumber(v[1]), v[2] or nil
  end
  eval_layer(ip, 5, state, now, dry)
  ip.deadline = deadline
  layers[1] = ip
  -- The IP layer comes before identity: a full one refuses without looking at the session.
  if not ip.room then
    local reply = answer(layers, false, now)
    reply[11] = ''
    return reply
  end
end
local category = ARGV[4]
local field = 'r:' .. category
local status, user, exp = session_touch(KEYS[1], KEYS[2], KEYS[3], ARGV[2], tonumber(ARGV[3]),
  math.floor(now / 1000), dry, 'o:' .. category, field)
if status ~= 1 then
  return {status - 1}
end
local tier, own = user[1], user[3]
local rule
if own then
  -- The user's own windows, counted with the tier's algorithm for the category.
  local at = string.find(ARGV[5], ';' .. tier .. '=', 1, true)
  local algo = at and string.sub(ARGV[5], at + #tier + 2, at + #tier + 2) or 'L'
  rule = parse_rule(algo .. own, 1)
else
  local at = string.find(ARGV[5], ';' .. tier .. '=', 1, true)
  if not at then
    return {-3, tier}
  end
  rule = parse_rule(ARGV[5], at + #tier + 2)
end
if rule.algo == 'L' and #rule.lim > #KEYS - 4 - ip_keys then
  return {-4, #rule.lim}
end
local mine = new_layer(rule)
eval_layer(mine, 5 + ip_keys, user[4] or nil, now, dry)
layers[#layers + 1] = mine
local allowed = mine.room
if allowed and not dry then
  if ip then
    commit_layer(ip, now, KEYS[4], 'r:ip')
    if ip.expires_us then
      extend_record(KEYS[4], ip.deadline, ip.expires_us, ip.rule.win[#ip.rule.win], now)
    end
  end
  commit_layer(mine, now, KEYS[3], field)
end
local reply = answer(layers, allowed, now)
reply[11] = tier
reply[12] = own or ''
reply[13] = exp
return reply
