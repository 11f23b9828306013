-- What one algorithm's state shows of another's, so that a change of policy (another algorithm,
-- other windows) never starts a category afresh. Needs prelude.lua and window.lua.

-- Entries of window lengths a rule no longer has are kept while they matter, this many at most.
local MAX_KEPT = 16

-- Counter and gcra keep their state in one field of the subject's record hash: 'C' or 'Q', then per
-- window length four packed doubles (counter: w, fixed window start, count, previous count; gcra: w,
-- time of the last change, debt, the limit it was counted with). 'G', gcra's state before it kept
-- its limit (three doubles), is read only as evidence for a new state.
-- Returns per window of the layer its stored numbers; the packed entries of other lengths that
-- still matter (a reload may bring them back) with the latest time one of them matters; and every
-- entry, of either algorithm, as evidence for a window with no entry of its own.
local function entries(layer, state, now)
  -- A fixed window counts in the counter's state.
  local counter = layer.algo == ALGO_SLIDING_COUNTER or layer.algo == ALGO_FIXED_WINDOW
  local letter = counter and 'C' or 'Q'
  local found, kept, latest, all = {}, {}, 0, {}
  local kind = state and sub(state, 1, 1)
  if kind == 'C' or kind == 'Q' or kind == 'G' then
    local size = kind == 'G' and 24 or 32
    local fmt = size == 32 and '<dddd' or '<ddd'
    for pos = 2, #state - size + 1, size do
      local w, a, b, c = sunpack(fmt, state, pos)
      all[#all + 1] = {kind, w, a, b, c}
      if kind == letter then
        local slot
        for i = 1, layer.n do
          if layer[10 * i - 8] == w then
            slot = i
          end
        end
        if slot then
          found[slot] = {a, b, c}
        else
          local matters = counter and a + 2 * w or a + b
          if matters > now and #kept < MAX_KEPT - layer.n then
            kept[#kept + 1] = sub(state, pos, pos + size - 1)
            latest = max(latest, matters)
          end
        end
      end
    end
  end
  return found, concat(kept), latest, all
end

-- How many requests of a window of `n` in `w` µs the entries show, for a window with no entry of
-- its own (a new length or a new algorithm); mirrors src/ratelimit/layer-state.ts's evidence: a
-- counter entry its counts whose fixed windows reach into this one, whole; a gcra entry the
-- requests its debt still stands for; a 'G' entry the share of its window its debt fills, times n.
local function evidence(all, n, w, now)
  local most, from = 0, now - w
  for _, e in ipairs(all) do
    local k = 0
    if e[1] == 'C' then
      local ew, b = e[2], e[3]
      if max(b, min(b + ew, now)) > from then
        k = e[4]
      end
      if b > from then
        k = k + e[5]
      end
    else
      local left = e[4] - (now - e[3])
      if left > 0 then
        if e[1] == 'Q' then
          k = left * e[5] / e[2]
        else
          k = min(left, e[2]) / e[2] * n
        end
      end
    end
    most = max(most, k)
  end
  -- Whole when within a millionth of a whole request, as src/ratelimit/layer-state.ts's snapCount:
  -- float noise of the unit (µs here, ms in the tests' reference) never decides a whole request.
  local whole = floor(most + 0.5)
  if whole - most < 1e-6 and most - whole < 1e-6 then
    return whole
  end
  return most
end

-- A sliding log's list that does not exist while the record holds a counter's or gcra's state of
-- the category (it was one until a change of policy): as many entries, at now, as that state shows
-- for the layer's fullest window; the first count writes them and drops the record's state.
-- Returns that count, or nil when there is nothing to take over.
local function log_seed(layer, now, record, field)
  local state = call('HGET', record, field)
  if not state then
    return nil
  end
  local _, _, _, all = entries({algo = ALGO_SLIDING_LOG, n = 0}, state, now)
  local most = 0
  for i = 1, layer.n do
    local n = layer[10 * i - 9]
    most = max(most, min(evidence(all, n, layer[10 * i - 8], now), n))
  end
  return ceil(most - EPS)
end

