// What the limiter keeps of a subject's category, per algorithm, and what one state shows of another.

/** Counts are compared with a little slack: the weighted counter's estimate is a float. */
export const EPS = 1e-9;

/**
 * Whether requests counted in [start, end) may fall inside the `w` µs before `now`: counted whole
 * when they may, as nothing tells when within their span they came (the safe side).
 */
function mayBeInside(start: number, end: number, now: number, w: number): boolean {
  return Math.max(start, end) > now - w;
}

/**
 * How many requests of a window of `limit` in `w` µs the kept states show, for a window that has no
 * state of its own (a new length, or a new algorithm): the log its entries inside the window (exact);
 * a counter entry its counts whose fixed windows reach into this one; a gcra entry the requests its
 * debt still stands for (its debt over its interval). The largest: they count the same requests.
 */
export function evidence(states: LayerStates | undefined, w: number, now: number): number {
  const record = states?.record;
  const log = states?.log;
  let most = log === undefined ? 0 : log.times.length - firstFresh(log.times, log.head, now - w);
  if (record?.algorithm === "sliding-counter") {
    for (const e of record.entries) {
      const end = Math.min(e.b + e.w, now);
      const k = (mayBeInside(e.b, end, now, w) ? e.c : 0) + (mayBeInside(e.b - e.w, e.b, now, w) ? e.p : 0);
      most = Math.max(most, k);
    }
  } else if (record?.algorithm === "gcra") {
    // The requests the debt still stands for, each at its own limit's interval.
    for (const e of record.entries) most = Math.max(most, (Math.max(0, e.debt - (now - e.at)) * e.n) / e.w);
  }
  return snapCount(most);
}

/**
 * A count as evidence gives it, whole when within a millionth of a whole request: the stores compute
 * it in µs, the tests' reference in ms, and a debt that stands for exactly one request must read as
 * 1 in both, not as 0.9999999999 in one and 1.0000000002 in the other (a whole request allowed or
 * refused on noise). Only whole counts are snapped: rounding every count to a millionth would make
 * ties of its own (0.9998125, a gcra debt of 3/16 s read 1 ms later, lies halfway between two
 * millionths), where noise would pick the millionth, and a new hour-long window's debt, 3.6 ms each.
 */
export const snapCount = (k: number): number => {
  const whole = Math.round(k);
  return Math.abs(k - whole) < 1e-6 ? whole : k;
};

/** One window's answer: as it stands, and as it would stand if this request were counted. */
export type WindowOutcome = {
  room: boolean;
  limit: number;
  windowUs: number;
  usedNow: number;
  remainingNow: number;
  resetNowUs: number;
  usedAfter: number;
  remainingAfter: number;
  resetAfterUs: number;
  /** When this request would be allowed (0 when there is room now). */
  retryAtUs: number;
};

/**
 * The sliding log: one list of request times in µs, oldest first, for every window of the layer;
 * entries before `head` are gone. A request counts in all of a layer's windows or in none, so one
 * list holds them all: it is cut at the longest window, and each window counts the entries inside
 * its own span, whatever windows the layer had before (a reload, an override, another order).
 */
export type LogState = { algorithm: "sliding-log"; times: number[]; head: number };
/** The sliding counter per window length: the current fixed window's start and count, the previous count. */
export type CounterState = {
  algorithm: "sliding-counter";
  entries: { w: number; b: number; c: number; p: number }[];
};
/**
 * gcra per window length: the debt (how far the bucket is ahead of now) as of time `at`, and the
 * limit `n` it was counted with (a debt is requests times their interval, w / n).
 */
export type GcraState = { algorithm: "gcra"; entries: { w: number; at: number; debt: number; n: number }[] };
export type LayerState = LogState | CounterState | GcraState;
/** The state a subject's record keeps for a category: one algorithm's at a time. */
export type RecordState = CounterState | GcraState;
/**
 * What is kept of a subject's category, as Redis keeps it: the sliding log's list, and the record's
 * counter or gcra state. Each survives a change of algorithm, so that a new one starts from what
 * the other shows.
 */
export type LayerStates = { log?: LogState; record?: RecordState };

export type LayerEvaluation = {
  outcomes: WindowOutcome[];
  room: boolean;
  /** What is kept of the category with this request counted (a state another algorithm's replaced). */
  commit(): LayerStates;
};

/** The index of the first entry from `head` on later than `cutoff` (the log is sorted). */
export function firstFresh(times: number[], head: number, cutoff: number): number {
  let lo = head;
  let hi = times.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if ((times[mid] as number) <= cutoff) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}
