// Model-based: the Redis and memory sliding windows answer exactly as a plain log does, on random timelines.
import fc from "fast-check";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { HitResult, RateLimitStore, Rule, WindowState } from "../../src/ratelimit/types.js";
import { createMemoryRateLimitStore } from "../../src/store/memory/rate-limit-store.js";
import { createKeys } from "../../src/store/redis/keys.js";
import { createRedisRateLimitStore } from "../../src/store/redis/rate-limit-store.js";
import { connectRedis, testPrefix } from "../support/redis.js";

/**
 * The reference: a list of request times per window, pruned and counted the obvious way. A request
 * leaves the window once `now - time >= windowMs`; a denied request is not recorded.
 */
function createModel() {
  const logs = new Map<string, number[]>();
  const logOf = (key: string): number[] => {
    let log = logs.get(key);
    if (log === undefined) {
      log = [];
      logs.set(key, log);
    }
    return log;
  };
  return {
    hit(key: string, rule: Rule, now: number): HitResult {
      const log = logOf(key).filter((t) => t > now - rule.windowMs);
      logs.set(key, log);
      const allowed = log.length < rule.limit;
      if (allowed) log.push(now);
      const used = log.length;
      const oldest = log[0] as number;
      // Denied: requests must leave until fewer than `limit` remain; the one that makes room is
      // the (used - limit)-th oldest.
      const makesRoom = allowed ? oldest : (log[used - rule.limit] as number);
      return {
        allowed,
        limit: rule.limit,
        used,
        remaining: Math.max(0, rule.limit - used),
        resetAtMs: oldest + rule.windowMs,
        retryAfterMs: allowed ? 0 : Math.max(1, makesRoom + rule.windowMs - now),
      };
    },
    peek(key: string, rule: Rule, now: number): WindowState {
      const counted = (logs.get(key) ?? []).filter((t) => t > now - rule.windowMs);
      const used = counted.length;
      return {
        limit: rule.limit,
        used,
        remaining: Math.max(0, rule.limit - used),
        resetAtMs: used === 0 ? now : (counted[0] as number) + rule.windowMs,
      };
    },
  };
}

type Step = {
  op: "hit" | "peek";
  subject: number;
  category: number;
  /** Milliseconds the clock moves before this step. */
  advance: number;
  /** Replaces the key's rule from this step on (a policy reload), when present. */
  rule: Rule | undefined;
};

const SUBJECTS = ["u:model-a", "u:model-b", "ip:192.0.2.1"];
const CATEGORIES = ["general", "search"];
// Windows of 10 s and more: Redis expires window keys in real time (PEXPIRE), and a run must never
// last long enough for a key to vanish while the pinned clock still counts its entries.
const WINDOWS = [10_000, 15_000, 60_000, 3_600_000];
const ruleArb = fc.record({
  limit: fc.integer({ min: 1, max: 6 }),
  windowMs: fc.oneof(fc.constantFrom(...WINDOWS), fc.integer({ min: 10_000, max: 20_000 })),
});
/** Steps that often land exactly on a window's edge, where an off-by-one would show. */
const advanceArb = fc.oneof(
  fc.constant(0),
  fc.constantFrom(1, 999, 1_000, 4_999, 5_000, 9_999, 10_000, 10_001, 14_999, 15_000, 60_000, 3_600_000),
  fc.integer({ min: 1, max: 999 }),
  fc.integer({ min: 1_000, max: 20_000 }),
  fc.integer({ min: 20_000, max: 4_000_000 }),
);

const timelineArb = (withRuleChanges: boolean) =>
  fc.record({
    start: fc.integer({ min: 1_600_000_000_000, max: 1_900_000_000_000 }),
    rules: fc.array(ruleArb, {
      minLength: SUBJECTS.length * CATEGORIES.length,
      maxLength: SUBJECTS.length * CATEGORIES.length,
    }),
    steps: fc.array(
      fc.record({
        op: fc.constantFrom<"hit" | "peek">("hit", "hit", "hit", "peek"),
        subject: fc.integer({ min: 0, max: SUBJECTS.length - 1 }),
        category: fc.integer({ min: 0, max: CATEGORIES.length - 1 }),
        advance: advanceArb,
        rule: withRuleChanges ? fc.option(ruleArb, { freq: 4, nil: undefined }) : fc.constant(undefined),
      }),
      { minLength: 1, maxLength: 60 },
    ),
  });

let redis: Redis;

beforeAll(() => {
  redis = connectRedis();
});

afterAll(() => {
  redis?.disconnect();
});

type StoreFactory = (clock: () => number) => { store: RateLimitStore; close(): void };

const stores: Array<[string, StoreFactory]> = [
  [
    "the Redis store",
    (clock) => ({
      store: createRedisRateLimitStore({ redis, keys: createKeys(testPrefix()), clock }),
      close: () => {},
    }),
  ],
  [
    "the memory store",
    (clock) => {
      const store = createMemoryRateLimitStore({ clock, sweepIntervalMs: 3_600_000 });
      return { store, close: () => store.close() };
    },
  ],
];

async function replay(factory: StoreFactory, timeline: { start: number; rules: Rule[]; steps: Step[] }) {
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
      const [actual, expected] =
        step.op === "hit"
          ? [await store.hit(subject, category, rule), model.hit(key, rule, now)]
          : [await store.peek(subject, category, rule), model.peek(key, rule, now)];
      expect(
        actual,
        `step ${i} (${step.op} ${key} ${JSON.stringify(rule)} at +${now - timeline.start} ms)`,
      ).toEqual(expected);
    }
  } finally {
    close();
  }
}

describe.each(stores)("%s against the reference log", (_name, factory) => {
  it("gives identical decisions, remaining, resetAtMs and retryAfterMs on random timelines", async () => {
    await fc.assert(
      fc.asyncProperty(timelineArb(false), (timeline) => replay(factory, timeline)),
      { numRuns: 150 },
    );
  });

  it("stays identical when limits and windows change between hits (policy reloads)", async () => {
    await fc.assert(
      fc.asyncProperty(timelineArb(true), (timeline) => replay(factory, timeline)),
      { numRuns: 100 },
    );
  });

  it("agrees with the reference on a hand-written timeline (the model itself is checked)", async () => {
    const model = createModel();
    const rule = { limit: 2, windowMs: 10_000 };
    expect(model.hit("k", rule, 0)).toMatchObject({ allowed: true, remaining: 1, resetAtMs: 10_000 });
    expect(model.hit("k", rule, 4_000)).toMatchObject({ allowed: true, remaining: 0, resetAtMs: 10_000 });
    expect(model.hit("k", rule, 9_999)).toMatchObject({ allowed: false, retryAfterMs: 1 });
    expect(model.hit("k", rule, 10_000)).toMatchObject({ allowed: true, used: 2, resetAtMs: 14_000 });
    await replay(factory, {
      start: 1_700_000_000_000,
      rules: Array(SUBJECTS.length * CATEGORIES.length).fill(rule),
      steps: [0, 4_000, 5_999, 1, 0, 9_999].map((advance) => ({
        op: "hit" as const,
        subject: 0,
        category: 0,
        advance,
        rule: undefined,
      })),
    });
  });
});
