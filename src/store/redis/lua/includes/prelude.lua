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
local function clock_us(pinned)
  if pinned and pinned ~= '' then
    return tonum(pinned)
  end
  local t = call('TIME')
  -- Arithmetic converts the digits once; tonumber would parse each twice.
  return t[1] * 1000000 + t[2]
end

-- Numbers go to Redis as %d strings: Lua's default formatting would round microsecond times.
local function int(n)
  return format('%d', n)
end
