// The three algorithms' arithmetic, in microseconds: the memory store runs it, the Lua scripts mirror it.
import {
  type CounterState,
  EPS,
  evidence,
  firstFresh,
  type GcraState,
  type LayerEvaluation,
  type LayerStates,
  type LogState,
  type RecordState,
  type WindowOutcome,
} from "./layer-state.js";
import type { HitResult, Rule, Window } from "./types.js";

/** gcra compares durations of up to days in µs: well above a double's rounding at that size. */
const EPS_US = 1e-3;
/** Entries of window lengths a rule no longer has are kept while they matter, this many at most. */
const MAX_KEPT = 16;

/** The stored entries of other window lengths that still matter at `now` (a reload may bring them back). */
function keptOthers<E extends { w: number }>(
  entries: readonly E[] | undefined,
  windows: readonly Window[],
  now: number,
  mattersUntil: (e: E) => number,
  room: number,
): E[] {
  const mine = new Set(windows.map((w) => w.windowMs * 1000));
  return (entries ?? []).filter((e) => !mine.has(e.w) && mattersUntil(e) > now).slice(0, Math.max(0, room));
}

/** Whether a log holds no entry at all (Redis: its list does not exist). */
const logGone = (log: LogState | undefined): boolean => log === undefined || log.times.length === log.head;

/**
 * Entries that left the longest window are dropped as Redis drops them: when the layer is used, not
 * peeked. A log that is gone while the record holds another algorithm's state (the category was a
 * counter or gcra until a change of policy) starts with as many entries, at now, as that state
 * shows for its fullest window; the first count writes them and drops the record's state.
 */
function evaluateLog(
  windows: readonly Window[],
  states: LayerStates | undefined,
  now: number,
  dry: boolean,
): LayerEvaluation {
  const migrating = logGone(states?.log) && states?.record !== undefined;
  const seeded = migrating
    ? Math.ceil(
        Math.max(...windows.map((w) => Math.min(evidence(states, w.windowMs * 1000, now), w.limit))) - EPS,
      )
    : 0;
  const list: LogState = states?.log ?? { algorithm: "sliding-log", times: [], head: 0 };
  const longest = Math.max(...windows.map((w) => w.windowMs)) * 1000;
  const start = firstFresh(list.times, list.head, now - longest);
  if (!dry) {
    list.head = start;
    if (list.head > 64 && list.head * 2 > list.times.length) {
      list.times = list.times.slice(list.head);
      list.head = 0;
    }
  }
  const from = dry ? start : list.head;
  // The seeded entries stand after the list's, at now.
  const at = (i: number): number => (i < list.times.length ? (list.times[i] as number) : now);
  const outcomes = windows.map((window): WindowOutcome => {
    const n = window.limit;
    const w = window.windowMs * 1000;
    const first = firstFresh(list.times, from, now - w);
    const used = list.times.length - first + seeded;
    const oldest = used === 0 ? now : at(first);
    const room = used < n;
    return {
      room,
      limit: n,
      windowUs: w,
      usedNow: used,
      remainingNow: Math.max(0, n - used),
      resetNowUs: oldest + (used === 0 ? 0 : w),
      usedAfter: used + 1,
      remainingAfter: n - used - 1,
      resetAfterUs: oldest + w,
      // Denied: the (used - limit)-th oldest entry's departure makes room.
      retryAtUs: room ? 0 : at(first + used - n) + w,
    };
  });
  return {
    outcomes,
    room: outcomes.every((o) => o.room),
    commit() {
      // A clock that steps back must not unsort the log.
      const last = list.times[list.times.length - 1];
      const stamp = last !== undefined && last > now ? last : now;
      for (let i = 0; i <= seeded; i += 1) list.times.push(stamp);
      return migrating ? { log: list } : { ...states, log: list };
    },
  };
}

/**
 * A duration in µs rounded up to a whole µs, with a nanosecond's tolerance: offsets are computed
 * from now (small numbers, exact enough), never from epoch times, whose doubles are coarser.
 */
const ceilUs = (x: number): number => Math.max(0, Math.ceil(x - 1e-3));

/**
 * How long (µs) until the weighted estimate falls to `target` or below, with no new requests:
 * `elapsed` into the current fixed window of length `w`, `c` its count, `p` the previous one's.
 */
export function counterWait(p: number, c: number, elapsed: number, w: number, target: number): number {
  if ((p * (w - elapsed)) / w + c <= target + EPS) return 0;
  if (c <= target + EPS && p > 0) return ceilUs(w * (1 - (target - c) / p) - elapsed);
  return ceilUs(2 * w - elapsed - (w * target) / c);
}

/**
 * The record's new state, and the log unless a window was seeded from it: the record then holds
 * what the log showed (Redis deletes the list in the same call).
 */
function recordCommitted(states: LayerStates | undefined, record: RecordState, seeded: boolean): LayerStates {
  return seeded || states?.log === undefined ? { record } : { log: states.log, record };
}

function evaluateCounter(
  windows: readonly Window[],
  states: LayerStates | undefined,
  now: number,
): LayerEvaluation {
  const own = states?.record?.algorithm === "sliding-counter" ? states.record : undefined;
  let seeded = false;
  const next: CounterState["entries"] = [];
  const outcomes = windows.map((window): WindowOutcome => {
    const n = window.limit;
    const w = window.windowMs * 1000;
    const stored = own?.entries.find((e) => e.w === w);
    const cb = now - (now % w);
    // A window without state of its own counts what the record's other entries show, in this fixed window.
    if (stored === undefined) seeded = true;
    let c = stored === undefined ? evidence(states, w, now) : 0;
    let p = 0;
    if (stored?.b === cb) {
      c = stored.c;
      p = stored.p;
    } else if (stored?.b === cb - w) {
      p = stored.c;
    }
    const elapsed = now - cb;
    const estimate = (p * (w - elapsed)) / w + c;
    const remainingNow = Math.max(0, Math.floor(n - estimate + EPS));
    const remainingAfter = Math.max(0, Math.floor(n - estimate - 1 + EPS));
    const room = estimate + 1 <= n + EPS;
    next.push({ w, b: cb, c: c + 1, p });
    return {
      room,
      limit: n,
      windowUs: w,
      usedNow: n - remainingNow,
      remainingNow,
      resetNowUs: now + (remainingNow >= n ? 0 : counterWait(p, c, elapsed, w, n - remainingNow - 1)),
      usedAfter: n - remainingAfter,
      remainingAfter,
      resetAfterUs: now + counterWait(p, c + 1, elapsed, w, n - remainingAfter - 1),
      retryAtUs: room ? 0 : now + counterWait(p, c, elapsed, w, n - 1),
    };
  });
  const others = keptOthers(own?.entries, windows, now, (e) => e.b + 2 * e.w, MAX_KEPT - next.length);
  return {
    outcomes,
    room: outcomes.every((o) => o.room),
    commit: () =>
      recordCommitted(states, { algorithm: "sliding-counter", entries: [...next, ...others] }, seeded),
  };
}

function evaluateGcra(
  windows: readonly Window[],
  states: LayerStates | undefined,
  now: number,
): LayerEvaluation {
  const own = states?.record?.algorithm === "gcra" ? states.record : undefined;
  let seeded = false;
  const next: GcraState["entries"] = [];
  const outcomes = windows.map((window): WindowOutcome => {
    const n = window.limit;
    const w = window.windowMs * 1000;
    const interval = w / n;
    const stored = own?.entries.find((e) => e.w === w);
    // A window without state of its own starts as far in debt as the record's other entries show.
    if (stored === undefined) seeded = true;
    const debt =
      stored === undefined
        ? Math.min(evidence(states, w, now), n) * interval
        : // Counted with another limit: the same requests, each at this limit's interval.
          (Math.max(0, stored.debt - (now - stored.at)) * stored.n) / n;
    const room = debt + interval <= w + EPS_US;
    const remainingNow = Math.max(0, Math.floor((w - debt) / interval + EPS));
    const after = debt + interval;
    const remainingAfter = Math.max(0, Math.floor((w - after) / interval + EPS));
    next.push({ w, at: now, debt: after, n });
    return {
      room,
      limit: n,
      windowUs: w,
      usedNow: n - remainingNow,
      remainingNow,
      resetNowUs: now + (remainingNow >= n ? 0 : ceilUs(debt - w + (remainingNow + 1) * interval)),
      usedAfter: n - remainingAfter,
      remainingAfter,
      resetAfterUs: now + ceilUs(after - w + (remainingAfter + 1) * interval),
      retryAtUs: room ? 0 : now + ceilUs(after - w),
    };
  });
  const others = keptOthers(own?.entries, windows, now, (e) => e.at + e.debt, MAX_KEPT - next.length);
  return {
    outcomes,
    room: outcomes.every((o) => o.room),
    commit: () => recordCommitted(states, { algorithm: "gcra", entries: [...next, ...others] }, seeded),
  };
}

/** One layer's windows against what is kept of its category (see LayerStates). */
export function evaluateLayer(
  rule: Rule,
  states: LayerStates | undefined,
  nowUs: number,
  dry = false,
): LayerEvaluation {
  switch (rule.algorithm) {
    case "sliding-log":
      return evaluateLog(rule.windows, states, nowUs, dry);
    case "sliding-counter":
      return evaluateCounter(rule.windows, states, nowUs);
    case "gcra":
      return evaluateGcra(rule.windows, states, nowUs);
  }
}

/**
 * The window an answer describes: allowed, the one with least room left after this request;
 * denied, the refusing one that frees last, of an enforced layer when one refused (`shadow` tells
 * which layers are in shadow mode). Ties go to the last layer (the most specific, the route's
 * category after the IP layer) and, within it, to the first (shortest) window.
 */
export function describedWindow(
  evaluations: readonly LayerEvaluation[],
  allowed: boolean,
  shadow: (layer: number) => boolean = () => false,
): { layer: number; window: number } {
  // A refusal by an enforced layer is the one to tell: a shadow layer's would read as a pass.
  const enforcedFull = !allowed && evaluations.some((e, l) => !e.room && !shadow(l));
  let best = Number.NEGATIVE_INFINITY;
  let layer = evaluations.length - 1;
  let window = 0;
  for (let l = evaluations.length - 1; l >= 0; l -= 1) {
    if (enforcedFull && shadow(l)) continue;
    const outcomes = (evaluations[l] as LayerEvaluation).outcomes;
    for (let i = 0; i < outcomes.length; i += 1) {
      const o = outcomes[i] as WindowOutcome;
      const value = allowed ? -o.remainingAfter : o.room ? undefined : o.retryAtUs;
      if (value !== undefined && value > best) {
        best = value;
        layer = l;
        window = i;
      }
    }
  }
  return { layer, window };
}

/** The answer in ms, from the described window of a decided request. */
export function hitResultOf(
  allowed: boolean,
  at: { layer: number; window: number },
  o: WindowOutcome,
  nowUs: number,
): HitResult {
  return {
    allowed,
    layer: at.layer,
    window: at.window,
    limit: o.limit,
    windowMs: o.windowUs / 1000,
    used: allowed ? o.usedAfter : o.usedNow,
    remaining: allowed ? o.remainingAfter : o.remainingNow,
    resetAtMs: (allowed ? o.resetAfterUs : o.resetNowUs) / 1000,
    retryAfterMs: allowed ? 0 : Math.max(1, Math.ceil((o.retryAtUs - nowUs) / 1000)),
  };
}
