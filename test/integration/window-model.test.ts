// Model-based: the Redis and memory limiters answer exactly as plain references of each algorithm do,
// on random timelines with policy changes between requests.
import fc from "fast-check";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { snapCount } from "../../src/ratelimit/layer-state.js";
import type { Limiter } from "../../src/ratelimit/limiter.js";
import type { Algorithm, HitResult, Layer, Rule, Window } from "../../src/ratelimit/types.js";
import { createKeys } from "../../src/store/redis/keys.js";
import { memoryLimiter, redisLimiter } from "../support/limiters.js";
import { connectRedis, testPrefix } from "../support/redis.js";

/**
 * A reference of one window: whether a request fits at `t` and how much room is left, from the
 * algorithm's definition, with the requests counted so far. Nothing here is shared with the code.
 */
type WindowModel = {
  fits(t: number): boolean;
  remaining(t: number): number;
  count(t: number): void;
};

/** The log: every counted request's time; a request leaves once `t - time >= window`. */
function logModel(w: Window, times: number[]): WindowModel {
  const inWindow = (t: number) => times.filter((x) => x > t - w.windowMs).length;
  return {
    fits: (t) => inWindow(t) < w.limit,
    remaining: (t) => Math.max(0, w.limit - inWindow(t)),
    count: (t) => times.push(t),
  };
}

/** Cloudflare's sliding counter: fixed windows' counts, the previous weighted by its overlap. */
function counterModel(w: Window, counts: Map<number, number>): WindowModel {
  const estimate = (t: number) => {
    const start = t - (t % w.windowMs);
    const previous = counts.get(start - w.windowMs) ?? 0;
    return (previous * (w.windowMs - (t - start))) / w.windowMs + (counts.get(start) ?? 0);
  };
  return {
    fits: (t) => estimate(t) + 1 <= w.limit + 1e-9,
    remaining: (t) => Math.max(0, Math.floor(w.limit - estimate(t) + 1e-9)),
    count: (t) => {
      const start = t - (t % w.windowMs);
      counts.set(start, (counts.get(start) ?? 0) + 1);
    },
  };
}

/**
 * GCRA as usually written: a theoretical arrival time, emission interval window/limit, burst `limit`.
 * Its times are absolute ms, whose doubles are coarse (about 2e-4 ms): compared with that slack.
 */
function gcraModel(w: Window, state: { tat: number }): WindowModel {
  const interval = w.windowMs / w.limit;
  const tat = (t: number) => Math.max(state.tat, t);
  return {
    fits: (t) => tat(t) + interval - t <= w.windowMs + 1e-3,
    remaining: (t) => Math.max(0, Math.floor((w.windowMs - (tat(t) - t)) / interval + 1e-6)),
    count: (t) => {
      state.tat = tat(t) + interval;
    },
  };
}

/** The earliest whole ms from `from` on at which `ok` holds (it holds from then on: time only frees). */
function earliest(from: number, ok: (t: number) => boolean, horizon: number): number {
  let lo = from;
  let hi = from + horizon;
  if (ok(lo)) return lo;
  while (hi - lo > 1) {
    const mid = Math.floor((lo + hi) / 2);
    if (ok(mid)) hi = mid;
    else lo = mid;
  }
  return hi;
}

/** How many entries of window lengths a rule no longer has the stores keep (while they matter). */
const MAX_KEPT = 16;

/**
 * Per key and algorithm: each window's requests, kept as the stores keep them across policy changes.
 * Counter and gcra: the window lengths the store holds an entry for (the rule's at its last count,
 * then the others while they matter), and a window without one starts from what the others show:
 * a counter's counts whose fixed windows reach into it, whole; a gcra debt as the share of its
 * window it fills, times the new window's limit.
 */
function createModel() {
  const logs = new Map<string, number[]>();
  const counters = new Map<string, Map<number, number>>();
  const lastStart = new Map<string, number>();
  const gcras = new Map<string, { tat: number; limit: number }>();
  const present = new Map<string, number[]>();

  const counterEntry = (key: string, w: number) => {
    const b = lastStart.get(`${key}|${w}`) ?? 0;
    const counts = counters.get(`${key}|${w}`);
    return { b, c: counts?.get(b) ?? 0, p: counts?.get(b - w) ?? 0 };
  };
  const matters = (key: string, algorithm: Algorithm, w: number, now: number) =>
    algorithm === "sliding-counter"
      ? counterEntry(key, w).b + 2 * w > now
      : (gcras.get(`${key}|${w}`)?.tat ?? 0) > now;
  const evidence = (key: string, algorithm: Algorithm, w: Window, now: number) => {
    let most = 0;
    for (const other of present.get(key) ?? []) {
      let k = 0;
      if (algorithm === "sliding-counter") {
        const e = counterEntry(key, other);
        if (Math.max(e.b, Math.min(e.b + other, now)) > now - w.windowMs) k = e.c;
        if (e.b > now - w.windowMs) k += e.p;
      } else {
        // The requests the debt stands for, each at the interval of the limit it was counted with.
        const g = gcras.get(`${key}|${other}`);
        k = (Math.max(0, (g?.tat ?? 0) - now) * (g?.limit ?? 1)) / other;
      }
      most = Math.max(most, k);
    }
    return snapCount(most);
  };

  const windowsOf = (key: string, rule: Rule, now: number): WindowModel[] =>
    rule.windows.map((w, i) => {
      if (rule.algorithm === "sliding-log") {
        // One list per key for every window, each counting the requests inside its own span; a
        // request is added once (by the first window), as it counts in all of them or in none.
        let kept = logs.get(key);
        if (kept === undefined) {
          kept = [];
          logs.set(key, kept);
        }
        const model = logModel(w, kept);
        return i === 0 ? model : { ...model, count: () => undefined };
      }
      const k = `${key}|${w.windowMs}`;
      const seeded = !(present.get(key) ?? []).includes(w.windowMs);
      if (rule.algorithm === "sliding-counter") {
        let counts = counters.get(k) ?? new Map<number, number>();
        if (seeded) counts = new Map([[now - (now % w.windowMs), evidence(key, rule.algorithm, w, now)]]);
        const model = counterModel(w, counts);
        return {
          ...model,
          count: (t) => {
            model.count(t);
            counters.set(k, counts);
            lastStart.set(k, t - (t % w.windowMs));
          },
        };
      }
      const kept = gcras.get(k);
      // A debt counted under another limit stands for as many requests at this limit's interval.
      const state = seeded
        ? { tat: now + Math.min(evidence(key, rule.algorithm, w, now), w.limit) * (w.windowMs / w.limit) }
        : kept === undefined
          ? { tat: 0 }
          : { tat: now + (Math.max(0, kept.tat - now) * kept.limit) / w.limit };
      const model = gcraModel(w, state);
      return {
        ...model,
        count: (t) => {
          model.count(t);
          gcras.set(k, { tat: state.tat, limit: w.limit });
        },
      };
    });
  const trim = (key: string, rule: Rule, now: number) => {
    if (rule.algorithm !== "sliding-log") return;
    // Cut at the longest window when used: a window made longer later finds only what was left.
    const longest = Math.max(...rule.windows.map((w) => w.windowMs));
    logs.set(
      key,
      (logs.get(key) ?? []).filter((x) => x > now - longest),
    );
  };
  /** After a count: the rule's windows, then the others that still matter, as the stores keep them. */
  const keep = (key: string, rule: Rule, now: number) => {
    if (rule.algorithm === "sliding-log") return;
    const mine = rule.windows.map((w) => w.windowMs);
    const others = (present.get(key) ?? []).filter(
      (w) => !mine.includes(w) && matters(key, rule.algorithm, w, now),
    );
    present.set(key, [...mine, ...others.slice(0, MAX_KEPT - mine.length)]);
  };
  return {
    /** The request's answer, compared on: allowed, which window is described, its numbers, Retry-After. */
    hit(key: string, rule: Rule, now: number) {
      trim(key, rule, now);
      const windows = windowsOf(key, rule, now);
      const allowed = windows.every((m) => m.fits(now));
      if (allowed) {
        keep(key, rule, now);
        for (const m of windows) m.count(now);
      }
      const horizon = 3 * Math.max(...rule.windows.map((w) => w.windowMs));
      if (allowed) {
        const remaining = windows.map((m) => m.remaining(now));
        const least = Math.min(...remaining);
        return { allowed, window: remaining.indexOf(least), remaining: least, retryAfterMs: 0 };
      }
      const frees = windows.map((m) => (m.fits(now) ? 0 : earliest(now, (t) => m.fits(t), horizon)));
      const last = Math.max(...frees);
      return { allowed, window: frees.indexOf(last), remaining: 0, retryAfterMs: Math.max(1, last - now) };
    },
    peek(key: string, rule: Rule, now: number) {
      return windowsOf(key, rule, now).map((m) => m.remaining(now));
    },
  };
}

const SUBJECTS = ["u:model-a", "ip:192.0.2.1"];
const CATEGORIES = ["general", "search"];
// Windows of 10 s and more: Redis expires keys in real time, and a run must never last long enough
// for a key to vanish while the pinned clock still counts its entries.
const WINDOWS = [10_000, 15_000, 60_000, 3_600_000];

const ruleArb = (algorithm: Algorithm) =>
  fc
    .uniqueArray(
      fc.record({
        limit: fc.integer({ min: 1, max: 6 }),
        windowMs: fc.oneof(
          fc.constantFrom(...WINDOWS),
          fc.integer({ min: 10, max: 20 }).map((s) => s * 1000),
        ),
      }),
      { minLength: 1, maxLength: 2, selector: (w) => w.windowMs },
    )
    .map((windows): Rule => ({ algorithm, windows: [...windows].sort((a, b) => a.windowMs - b.windowMs) }));

/** Steps that often land exactly on a window's edge, where an off-by-one would show. */
const advanceArb = fc.oneof(
  fc.constant(0),
  fc.constantFrom(1, 999, 1_000, 4_999, 5_000, 9_999, 10_000, 10_001, 14_999, 15_000, 60_000, 3_600_000),
  fc.integer({ min: 1, max: 999 }),
  fc.integer({ min: 1_000, max: 20_000 }),
  fc.integer({ min: 20_000, max: 4_000_000 }),
);

const timelineArb = (algorithm: Algorithm, withRuleChanges: boolean) =>
  fc.record({
    // Whole seconds, so that fixed windows start where the model expects them.
    start: fc.integer({ min: 1_600_000_000, max: 1_900_000_000 }).map((s) => s * 1000),
    rules: fc.array(ruleArb(algorithm), {
      minLength: SUBJECTS.length * CATEGORIES.length,
      maxLength: SUBJECTS.length * CATEGORIES.length,
    }),
    steps: fc.array(
      fc.record({
        op: fc.constantFrom<"hit" | "peek">("hit", "hit", "hit", "peek"),
        subject: fc.integer({ min: 0, max: SUBJECTS.length - 1 }),
        category: fc.integer({ min: 0, max: CATEGORIES.length - 1 }),
        advance: advanceArb,
        rule: withRuleChanges
          ? fc.option(ruleArb(algorithm), { freq: 4, nil: undefined })
          : fc.constant(undefined),
      }),
      { minLength: 1, maxLength: 50 },
    ),
  });

type Timeline = {
  start: number;
  rules: Rule[];
  steps: { op: "hit" | "peek"; subject: number; category: number; advance: number; rule: Rule | undefined }[];
};

let redis: Redis;
beforeAll(() => {
  redis = connectRedis();
});
afterAll(() => {
  redis?.disconnect();
});

type StoreFactory = (clock: () => number) => { store: Limiter; close(): void };
const stores: Array<[string, StoreFactory]> = [
  [
    "the Redis store",
    (clock) => ({
      store: redisLimiter({ redis, keys: createKeys(testPrefix()), clock }),
      close: () => {},
    }),
  ],
  [
    "the memory store",
    (clock) => {
      const store = memoryLimiter({ clock, sweepIntervalMs: 3_600_000 });
      return { store, close: () => store.close() };
    },
  ],
];

const compared = (hit: HitResult) => ({
  allowed: hit.allowed,
  window: hit.window,
  remaining: hit.remaining,
  retryAfterMs: hit.retryAfterMs,
});

async function replay(factory: StoreFactory, timeline: Timeline) {
  let now = timeline.start;
  const { store, close } = factory(() => now);
  const model = createModel();
  const rules = [...timeline.rules];
  try {
    for (const [i, step] of timeline.steps.entries()) {
      now += step.advance;
      const index = step.subject * CATEGORIES.length + step.category;
      if (step.rule !== undefined) rules[index] = step.rule;
      const rule = rules[index] as Rule;
      const subject = SUBJECTS[step.subject] as string;
      const category = CATEGORIES[step.category] as string;
      const key = `${subject}|${category}`;
      const layer: Layer = { category, rule };
      const where = `step ${i} (${step.op} ${key} ${JSON.stringify(rule)} at +${now - timeline.start} ms)`;
      if (step.op === "hit") {
        expect(compared(await store.hit(subject, [layer])), where).toEqual(model.hit(key, rule, now));
      } else {
        expect(
          (await store.peek(subject, layer)).map((w) => w.remaining),
          where,
        ).toEqual(model.peek(key, rule, now));
      }
    }
  } finally {
    close();
  }
}

describe.each(stores)("%s against plain references", (_name, factory) => {
  describe.each(["sliding-log", "sliding-counter", "gcra"] as const)("%s", (algorithm) => {
    it("gives identical decisions, remaining and Retry-After on random timelines", async () => {
      await fc.assert(
        fc.asyncProperty(timelineArb(algorithm, false), (timeline) => replay(factory, timeline)),
        { numRuns: 80 },
      );
    });

    it("stays identical when limits and windows change between hits (policy reloads)", async () => {
      await fc.assert(
        fc.asyncProperty(timelineArb(algorithm, true), (timeline) => replay(factory, timeline)),
        { numRuns: 50 },
      );
    });
  });
});

describe("the references themselves", () => {
  it("count as the algorithms are defined, on hand-written timelines", () => {
    const model = createModel();
    const log: Rule = { algorithm: "sliding-log", windows: [{ limit: 2, windowMs: 10_000 }] };
    expect(model.hit("k", log, 0)).toMatchObject({ allowed: true, remaining: 1 });
    expect(model.hit("k", log, 4_000)).toMatchObject({ allowed: true, remaining: 0 });
    expect(model.hit("k", log, 9_999)).toMatchObject({ allowed: false, retryAfterMs: 1 });
    expect(model.hit("k", log, 10_000)).toMatchObject({ allowed: true, remaining: 0 });

    const gcra: Rule = { algorithm: "gcra", windows: [{ limit: 5, windowMs: 1_000 }] };
    const burst = Array.from({ length: 6 }, () => model.hit("g", gcra, 0));
    expect(burst.map((r) => r.allowed)).toEqual([true, true, true, true, true, false]);
    expect(burst[5]).toMatchObject({ retryAfterMs: 200 });

    const counter: Rule = { algorithm: "sliding-counter", windows: [{ limit: 4, windowMs: 10_000 }] };
    for (let i = 0; i < 4; i += 1) expect(model.hit("c", counter, 0).allowed).toBe(true);
    expect(model.hit("c", counter, 15_000)).toMatchObject({ allowed: true, remaining: 1 });
    expect(model.hit("c", counter, 15_000)).toMatchObject({ allowed: true, remaining: 0 });
    expect(model.hit("c", counter, 15_000)).toMatchObject({ allowed: false, retryAfterMs: 2_500 });
  });
});
