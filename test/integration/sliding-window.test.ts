// The sliding window on a real Redis in real time: concurrency, many processes, sliding, TTLs.
import { fork } from "node:child_process";
import { fileURLToPath } from "node:url";
import type { Redis } from "ioredis";
import { afterAll, describe, expect, it } from "vitest";
import type { HitResult, Rule } from "../../src/ratelimit/types.js";
import { createKeys } from "../../src/store/redis/keys.js";
import { createRedisRateLimitStore } from "../../src/store/redis/rate-limit-store.js";
import { connectRedis, redisUrl, testPrefix } from "../support/redis.js";

const prefix = testPrefix();
const keys = createKeys(prefix);
const clients: Redis[] = Array.from({ length: 8 }, () => connectRedis());
const stores = clients.map((redis) => createRedisRateLimitStore({ redis, keys }));
const store = stores[0] as (typeof stores)[number];
const redis = clients[0] as Redis;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

afterAll(async () => {
  await Promise.all(clients.map((c) => c.quit()));
});

describe("sliding window on Redis under concurrency", () => {
  it("admits exactly 100 of 500 concurrent hits spread over 8 connections", async () => {
    const rule: Rule = { limit: 100, windowMs: 60_000 };
    const results = await Promise.all(
      Array.from({ length: 500 }, (_, i) => stores[i % stores.length]?.hit("u:burst", "general", rule)),
    );
    const allowed = results.filter((r) => r?.allowed).length;
    expect(allowed).toBe(100);
    expect(results.filter((r) => r?.allowed === false)).toHaveLength(400);
    expect(await redis.zcard(keys.window("u:burst", "general"))).toBe(100);
  });

  it("admits exactly 100 in total across 4 separate Node processes sharing one Redis", async () => {
    const worker = fileURLToPath(new URL("../support/hit-worker.mjs", import.meta.url));
    const children = Array.from({ length: 4 }, () =>
      fork(worker, [redisUrl(), prefix, "u:multi", "150", "100", "60000"], { stdio: "inherit" }),
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

describe("sliding window on Redis in real time", () => {
  it("slides: 5 per 2 s, the 6th waits ~2 s, then exactly one more passes", async () => {
    const rule: Rule = { limit: 5, windowMs: 2_000 };
    const first: HitResult[] = [];
    for (let i = 0; i < 5; i += 1) {
      first.push(await store.hit("u:slide", "general", rule));
      if (i < 4) await sleep(150);
    }
    expect(first.every((r) => r.allowed)).toBe(true);
    const sixth = await store.hit("u:slide", "general", rule);
    expect(sixth.allowed).toBe(false);
    // The oldest entry is ~600 ms old, so about 1.4 s remain of its window.
    expect(sixth.retryAfterMs).toBeGreaterThan(1_200);
    expect(sixth.retryAfterMs).toBeLessThanOrEqual(2_000);
    expect(sixth.resetAtMs).toBe((first[0] as HitResult).resetAtMs);

    await sleep(sixth.retryAfterMs + 30);
    const after = await Promise.all([1, 2, 3].map(() => store.hit("u:slide", "general", rule)));
    expect(after.filter((r) => r.allowed)).toHaveLength(1);
  });

  it("a 6th request right after 5 waits close to the whole window", async () => {
    const rule: Rule = { limit: 5, windowMs: 2_000 };
    for (let i = 0; i < 5; i += 1) await store.hit("u:sixth", "general", rule);
    const sixth = await store.hit("u:sixth", "general", rule);
    expect(sixth.allowed).toBe(false);
    expect(sixth.retryAfterMs).toBeGreaterThan(1_800);
    expect(sixth.retryAfterMs).toBeLessThanOrEqual(2_000);
  });

  it("gets nothing through with the double-window attack: fill, wait half a window, retry", async () => {
    const rule: Rule = { limit: 5, windowMs: 2_000 };
    const fill = await Promise.all([1, 2, 3, 4, 5].map(() => store.hit("u:double", "general", rule)));
    expect(fill.every((r) => r.allowed)).toBe(true);
    await sleep(1_000);
    const retry = await Promise.all([1, 2, 3, 4, 5].map(() => store.hit("u:double", "general", rule)));
    expect(retry.filter((r) => r.allowed)).toHaveLength(0);
  });

  it("gives window keys a TTL of at most one window, and denied hits add nothing", async () => {
    const rule: Rule = { limit: 3, windowMs: 5_000 };
    const key = keys.window("ip:192.0.2.1", "search");
    for (let i = 0; i < 10; i += 1) await store.hit("ip:192.0.2.1", "search", rule);
    const ttl = await redis.pttl(key);
    expect(ttl).toBeGreaterThan(4_000);
    expect(ttl).toBeLessThanOrEqual(5_000 + 50);
    expect(await redis.zcard(key)).toBe(3);
  });

  it("keeps every key of a subject under one hash tag", async () => {
    await store.hit("u:tagged", "orders", { limit: 1, windowMs: 1_000 });
    const found = await redis.keys(`${prefix}*tagged*`);
    expect(found).toEqual([`${prefix}{u:tagged}:w:orders`]);
  });
});
