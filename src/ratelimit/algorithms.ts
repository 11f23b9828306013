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
import type { Rule, Window } from "./types.js";

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
  k: number,
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
    const room = used + k <= n;
    const resetNowUs = oldest + (used === 0 ? 0 : w);
    return {
      room,
      limit: n,
      windowUs: w,
      usedNow: used,
      remainingNow: Math.max(0, n - used),
      resetNowUs,
      usedAfter: used + k,
      remainingAfter: room ? n - used - k : 0,
      resetAfterUs: k > 0 || !room ? oldest + w : resetNowUs,
      // Denied: the (used + k - limit)-th oldest entry's departure makes room (past the entries: a window).
      retryAtUs: room ? 0 : at(first + used + k - n - 1) + w,
    };
  });
  return {
    outcomes,
    room: outcomes.every((o) => o.room),
    commit() {
      // A clock that steps back must not unsort the log.
      const last = list.times[list.times.length - 1];
      const stamp = last !== undefined && last > now ? last : now;
      for (let i = 0; i < seeded + k; i += 1) list.times.push(stamp);
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
  // More than the limit at once: never; both fixed windows passing is the honest bound.
  if (target < 0) return 2 * w - elapsed;
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

/**
 * The counter's state ('C'), per window length: the count `c` of the fixed window `now` is in
 * (aligned to a multiple of its length) and `p` of the one before. A window without state of its
 * own counts what the record's other entries show, in this fixed window; `whole` reads counts as
 * whole requests (a count the sliding counter started from a gcra debt's share, say 1.5, rounded
 * up, as the evidence a window starts from is). `answer` is the algorithm's.
 */
function evaluateCounterState(
  windows: readonly Window[],
  states: LayerStates | undefined,
  now: number,
  k: number,
  whole: boolean,
  answer: (n: number, w: number, cb: number, c: number, p: number) => WindowOutcome,
): LayerEvaluation {
  const own = states?.record?.algorithm === "sliding-counter" ? states.record : undefined;
  const count = (x: number): number => (whole ? Math.max(0, Math.ceil(x - EPS)) : x);
  let seeded = false;
  const next: CounterState["entries"] = [];
  const outcomes = windows.map((window): WindowOutcome => {
    const w = window.windowMs * 1000;
    const stored = own?.entries.find((e) => e.w === w);
    const cb = now - (now % w);
    if (stored === undefined) seeded = true;
    let c = stored === undefined ? count(evidence(states, w, now)) : 0;
    let p = 0;
    if (stored?.b === cb) {
      c = count(stored.c);
      p = stored.p;
    } else if (stored?.b === cb - w) {
      p = stored.c;
    }
    next.push({ w, b: cb, c: c + k, p });
    return answer(window.limit, w, cb, c, p);
  });
  const others = keptOthers(own?.entries, windows, now, (e) => e.b + 2 * e.w, MAX_KEPT - next.length);
  return {
    outcomes,
    room: outcomes.every((o) => o.room),
    commit: () =>
      recordCommitted(states, { algorithm: "sliding-counter", entries: [...next, ...others] }, seeded),
  };
}

/** Two fixed-window counts weighted by the previous window's overlap with the sliding one. */
function evaluateCounter(
  windows: readonly Window[],
  states: LayerStates | undefined,
  now: number,
  k: number,
): LayerEvaluation {
  return evaluateCounterState(windows, states, now, k, false, (n, w, cb, c, p) => {
    const elapsed = now - cb;
    const estimate = (p * (w - elapsed)) / w + c;
    const remainingNow = Math.max(0, Math.floor(n - estimate + EPS));
    const remainingAfter = remainingNow > 0 ? Math.max(0, Math.floor(n - estimate - k + EPS)) : 0;
    const room = estimate + k <= n + EPS;
    return {
      room,
      limit: n,
      windowUs: w,
      usedNow: n - remainingNow,
      remainingNow,
      resetNowUs: now + (remainingNow >= n ? 0 : counterWait(p, c, elapsed, w, n - remainingNow - 1)),
      usedAfter: n - remainingAfter,
      remainingAfter,
      resetAfterUs: now + counterWait(p, c + k, elapsed, w, n - remainingAfter - 1),
      retryAtUs: room ? 0 : now + counterWait(p, c, elapsed, w, n - k),
    };
  });
}

/**
 * One counter per fixed window, refused when the count would pass the limit; it frees at the
 * window's end. It keeps the sliding counter's state (`p` carried as the counter keeps it), so
 * either algorithm reads what the other counted.
 */
function evaluateFixed(
  windows: readonly Window[],
  states: LayerStates | undefined,
  now: number,
  k: number,
): LayerEvaluation {
  return evaluateCounterState(windows, states, now, k, true, (n, w, cb, c) => {
    const end = cb + w;
    const room = c + k <= n;
    return {
      room,
      limit: n,
      windowUs: w,
      usedNow: Math.min(c, n),
      remainingNow: Math.max(0, n - c),
      resetNowUs: c > 0 ? end : now,
      usedAfter: Math.min(c + k, n),
      remainingAfter: room ? n - c - k : 0,
      resetAfterUs: c + k > 0 ? end : now,
      // More than the limit at once never passes; the next window is the honest bound.
      retryAtUs: room ? 0 : k > n ? end + w : end,
    };
  });
}

function evaluateGcra(
  windows: readonly Window[],
  states: LayerStates | undefined,
  now: number,
  k: number,
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
    const after = debt + k * interval;
    const room = after <= w + EPS_US;
    const remainingNow = Math.max(0, Math.floor((w - debt) / interval + EPS));
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
  k = 1,
): LayerEvaluation {
  switch (rule.algorithm) {
    case "sliding-log":
      return evaluateLog(rule.windows, states, nowUs, dry, k);
    case "sliding-counter":
      return evaluateCounter(rule.windows, states, nowUs, k);
    case "gcra":
      return evaluateGcra(rule.windows, states, nowUs, k);
    case "fixed-window":
      return evaluateFixed(rule.windows, states, nowUs, k);
  }
}
