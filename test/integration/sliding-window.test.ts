// The limiter on a real Redis in real time: concurrency, many processes, sliding, TTLs, hash tags.
import { fork } from "node:child_process";
import { fileURLToPath } from "node:url";
import type { Redis } from "ioredis";
import { afterAll, describe, expect, it } from "vitest";
import { ALGORITHMS, type HitResult, type Layer, logRule } from "../../src/ratelimit/types.js";
import { createKeys } from "../../src/store/redis/keys.js";
import { redisLimiter } from "../support/limiters.js";
import { connectRedis, redisUrl, testPrefix } from "../support/redis.js";

const prefix = testPrefix();
const keys = createKeys(prefix);
const clients: Redis[] = Array.from({ length: 8 }, () => connectRedis());
const stores = clients.map((redis) => redisLimiter({ redis, keys }));
const store = stores[0] as (typeof stores)[number];
const redis = clients[0] as Redis;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const general = (limit: number, windowMs: number): Layer[] => [
  { category: "general", rule: logRule(limit, windowMs) },
];

afterAll(async () => {
  await Promise.all(clients.map((c) => c.quit()));
});

/**
 * A fixed window (windows at multiples of their length, on Redis's clock, this host's) lets a burst
 * that straddles its end through twice: waits, when less than `needMs` are left of the current
 * window, until the next one starts, so that every hit of the test falls in one window.
 */
async function clearOfWindowEnd(windowMs: number, needMs: number): Promise<number> {
  const left = windowMs - (Date.now() % windowMs);
  if (left < needMs) await sleep(left + 50);
  return Math.ceil(Date.now() / windowMs) * windowMs;
}

describe.each(ALGORITHMS)("%s on Redis under concurrency", (algorithm) => {
  // An hour: the fixed window's end falls inside a test's hits only if the test waits for nothing.
  const windowMs = 3_600_000;
  const layers: Layer[] = [{ category: "general", rule: { algorithm, windows: [{ limit: 100, windowMs }] } }];

  it("admits exactly 100 of 500 concurrent hits spread over 8 connections", { timeout: 60_000 }, async () => {
    const subject = `u:burst-${algorithm}`;
    const end = await clearOfWindowEnd(windowMs, 15_000);
    const before = Date.now();
    const results = (await Promise.all(
      Array.from({ length: 500 }, (_, i) => stores[i % stores.length]?.hit(subject, layers)),
    )) as HitResult[];
    const after = Date.now();
    expect(results.filter((r) => r.allowed)).toHaveLength(100);
    expect(results.filter((r) => r.allowed === false)).toHaveLength(400);
    expect(Math.min(...results.map((r) => r.remaining))).toBe(0);
    if (algorithm === "fixed-window") {
      // One window, which frees at its end: every answer says so, and a refused hit waits for it.
      expect(new Set(results.map((r) => r.resetAtMs))).toEqual(new Set([end]));
      for (const r of results.filter((r) => !r.allowed)) {
        expect(r.retryAfterMs).toBeGreaterThanOrEqual(end - after - 1);
        expect(r.retryAfterMs).toBeLessThanOrEqual(end - before + 1);
      }
    }
  });

  it("admits exactly 100 in total across 4 separate Node processes sharing one Redis", {
    timeout: 60_000,
  }, async () => {
    await clearOfWindowEnd(windowMs, 20_000);
    const worker = fileURLToPath(new URL("../support/hit-worker.mjs", import.meta.url));
    const children = Array.from({ length: 4 }, () =>
      fork(worker, [redisUrl(), prefix, `u:multi-${algorithm}`, "150", "100", String(windowMs), algorithm], {
        stdio: "inherit",
      }),
    );
    await Promise.all(
      children.map((child) => new Promise<void>((resolve) => child.once("message", () => resolve()))),
    );
    const reports = children.map(
      (child) =>
        new Promise<{ allowed: number; denied: number }>((resolve, reject) => {
          child.once("message", (m) => resolve(m as { allowed: number; denied: number }));
          child.once("exit", (code) => code !== 0 && reject(new Error(`worker exited ${code}`)));
        }),
    );
    for (const child of children) child.send({ go: true });
    const totals = await Promise.all(reports);
    expect(totals.reduce((sum, t) => sum + t.allowed, 0)).toBe(100);
    expect(totals.reduce((sum, t) => sum + t.denied, 0)).toBe(500);
  });
});

describe("sliding log on Redis in real time", () => {
  it("slides: 5 per 2 s, the 6th waits ~2 s, then exactly one more passes", async () => {
    const rule = general(5, 2_000);
    const first: HitResult[] = [];
    for (let i = 0; i < 5; i += 1) {
      first.push(await store.hit("u:slide", rule));
      if (i < 4) await sleep(150);
    }
    expect(first.every((r) => r.allowed)).toBe(true);
    const sixth = await store.hit("u:slide", rule);
    expect(sixth.allowed).toBe(false);
    // The oldest entry is ~600 ms old, so about 1.4 s remain of its window.
    expect(sixth.retryAfterMs).toBeGreaterThan(1_200);
    expect(sixth.retryAfterMs).toBeLessThanOrEqual(2_000);
    expect(sixth.resetAtMs).toBe((first[0] as HitResult).resetAtMs);

    await sleep(sixth.retryAfterMs + 30);
    const after = await Promise.all([1, 2, 3].map(() => store.hit("u:slide", rule)));
    expect(after.filter((r) => r.allowed)).toHaveLength(1);
  });

  it("a 6th request right after 5 waits close to the whole window", async () => {
    const rule = general(5, 2_000);
    for (let i = 0; i < 5; i += 1) await store.hit("u:sixth", rule);
    const sixth = await store.hit("u:sixth", rule);
    expect(sixth.allowed).toBe(false);
    expect(sixth.retryAfterMs).toBeGreaterThan(1_800);
    expect(sixth.retryAfterMs).toBeLessThanOrEqual(2_000);
  });

  it("gets nothing through with the double-window attack: fill, wait half a window, retry", async () => {
    const rule = general(5, 2_000);
    const fill = await Promise.all([1, 2, 3, 4, 5].map(() => store.hit("u:double", rule)));
    expect(fill.every((r) => r.allowed)).toBe(true);
    await sleep(1_000);
    const retry = await Promise.all([1, 2, 3, 4, 5].map(() => store.hit("u:double", rule)));
    expect(retry.filter((r) => r.allowed)).toHaveLength(0);
  });

  it("keeps one list for all of a layer's windows, with a TTL of the longest; denied hits add nothing", async () => {
    const layers: Layer[] = [
      {
        category: "search",
        rule: {
          algorithm: "sliding-log",
          windows: [
            { limit: 3, windowMs: 5_000 },
            { limit: 5, windowMs: 60_000 },
          ],
        },
      },
    ];
    for (let i = 0; i < 10; i += 1) await store.hit("ip:192.0.2.1", layers);
    const list = keys.log("ip:192.0.2.1", "search");
    expect(await redis.keys(`${prefix}{ip:192.0.2.1}:l:*`)).toEqual([list]);
    expect(await redis.pttl(list)).toBeGreaterThan(59_000);
    expect(await redis.pttl(list)).toBeLessThanOrEqual(60_000 + 650);
    expect(await redis.llen(list)).toBe(3);
  });

  it("drops the entries that left the window when it is next used", async () => {
    const rule = general(50, 1_000);
    for (let i = 0; i < 40; i += 1) await store.hit("u:trim", rule);
    await sleep(600);
    for (let i = 0; i < 5; i += 1) await store.hit("u:trim", rule);
    await sleep(500);
    expect((await store.hit("u:trim", rule)).used).toBe(6);
    expect(await redis.llen(keys.log("u:trim", "general"))).toBe(6);
  });
});

describe("counter and gcra state on Redis", () => {
  it("lives in one field of an address's record, which expires once the state no longer matters", async () => {
    for (const algorithm of ["sliding-counter", "gcra"] as const) {
      const subject = `ip:198.51.100.${algorithm.length}`;
      const layers: Layer[] = [
        { category: "general", rule: { algorithm, windows: [{ limit: 5, windowMs: 2_000 }] } },
      ];
      await store.hit(subject, layers);
      const record = keys.record(subject);
      expect(await redis.hkeys(record)).toEqual(expect.arrayContaining(["r:general", "x"]));
      const ttl = await redis.pttl(record);
      // counter: two windows (its fixed window and the next); gcra: its debt; plus one window of slack.
      expect(ttl).toBeGreaterThan(1_000);
      expect(ttl).toBeLessThanOrEqual(3 * 2_000 + 50);
    }
  });

  it("reads a gcra state from before gcra kept its limit as the share of its window it fills", async () => {
    const nowMs = 1_700_000_000_000;
    const pinned = redisLimiter({ redis, keys, clock: () => nowMs });
    const subject = "ip:198.51.100.77";
    const w = 3_600_000_000;
    // Three quarters of the hour in debt, written as the build before this one wrote it ('G', 3 doubles).
    const legacy = Buffer.alloc(25);
    legacy.write("G", 0);
    legacy.writeDoubleLE(w, 1);
    legacy.writeDoubleLE(nowMs * 1000, 9);
    legacy.writeDoubleLE(0.75 * w, 17);
    await redis.hset(keys.record(subject), "r:general", legacy);
    const layers: Layer[] = [
      { category: "general", rule: { algorithm: "gcra", windows: [{ limit: 8, windowMs: 3_600_000 }] } },
    ];
    const results = [];
    for (let i = 0; i < 4; i += 1) results.push((await pinned.hit(subject, layers)).allowed);
    expect(results).toEqual([true, true, false, false]);
    expect((await redis.hgetBuffer(keys.record(subject), "r:general"))?.toString("latin1", 0, 1)).toBe("Q");
  });

  it("keeps a user's state in the user hash, which never expires", async () => {
    const layers: Layer[] = [
      { category: "orders", rule: { algorithm: "gcra", windows: [{ limit: 5, windowMs: 2_000 }] } },
    ];
    await redis.hset(keys.user("stateful"), "tier", "free");
    await store.hit("u:stateful", layers);
    expect(await redis.hkeys(keys.user("stateful"))).toEqual(["tier", "r:orders"]);
    expect(await redis.pttl(keys.user("stateful"))).toBe(-1);
  });
});

describe("key layout", () => {
  it("keeps every key of a subject under one hash tag", async () => {
    await store.hit("u:tagged", [{ category: "orders", rule: logRule(1, 1_000) }]);
    const found = await redis.keys(`${prefix}*tagged*`);
    expect(found).toEqual([`${prefix}{u:tagged}:l:orders`]);
  });
});
