-- The standard library as locals, and what every limiter script shares: the clock and numbers.
-- Redis loads a function library without the standard globals (they exist only while a function
-- runs), so the loader makes every function start with `if not call then bind_globals() end`; an
-- upvalue also costs Lua less than a global table lookup on every use.
local sub, byte, find, match, gmatch, format, char, concat, spack, sunpack, floor, ceil, min, max, call, tonum
local function bind_globals()
  sub, byte, find, match, gmatch, format, char = string.sub, string.byte, string.find, string.match,
    string.gmatch, string.format, string.char
  concat, spack, sunpack = table.concat, struct.pack, struct.unpack
  floor, ceil, min, max = math.floor, math.ceil, math.min, math.max
  call, tonum = redis.call, tonumber
end

-- Now in microseconds: ARGV "now" when a test pins the clock, otherwise Redis TIME (one clock for all).
-- `real_clock` tells the rest of the call which it is (a pinned clock is not the one expiries run on).
local real_clock = false
local function clock_us(pinned)
  if pinned and pinned ~= '' then
    real_clock = false
    return tonum(pinned)
  end
  real_clock = true
  local t = call('TIME')
  -- Arithmetic converts the digits once; tonumber would parse each twice.
  return t[1] * 1000000 + t[2]
end

-- Numbers go to Redis as %d strings: Lua's default formatting would round microsecond times.
local function int(n)
  return format('%d', n)
end

-- What a function library keeps between calls (its upvalues live as long as it is loaded; a
-- restart, a promoted replica or a new version starts it empty): parsed rules, and per sliding-log
-- list its expiry and whether its last count left room (one number, see layer.lua's extend_log and
-- log_room). Only what any call could derive again or guess: a lost memo costs time, never a wrong
-- answer. Kept because it measured 21% fewer Redis instructions per allowed check and 13% per
-- denied one (callgrind, 2026-12-04; parsing, a TTL read and a length read are most of what the
-- usual check does besides its commands).
-- Small, in two generations: when the newer holds MEMO_GENERATION entries it becomes the older and
-- the oldest is dropped; recall carries an entry it finds in the older into the newer, so what is
-- used in every generation (a busy list, the rules) stays and the rest ages out. Small because all
-- the library keeps is work for Lua's collector, which Redis steps every few calls: three
-- sliding-log descriptors (bench/rls-memo.mjs, 2026-12-05, means of 15 batches) cost Redis 28.4 µs
-- per call beside a memo of 9,500 lists (what the whole bench leaves) and 26.3 µs with these
-- generations, where a memo of a few entries costs 24.8-25.2.
local MEMO_GENERATION = 1000
local memo, older, memo_size = {}, {}, 0
local function remember(key, value)
  if memo_size >= MEMO_GENERATION then
    memo, older, memo_size = {}, memo, 0
  end
  memo[key], memo_size = value, memo_size + 1
  return value
end
-- What the older generation knows of key, carried into the newer: read as `memo[key] or recall(key)`
-- (no entry is false), so that a hit in the newer costs no call.
local function recall(key)
  local value = older[key]
  if value ~= nil then
    remember(key, value)
  end
  return value
end
