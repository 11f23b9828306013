// The rate limit service's fixed window on Redis (src/store/redis/window-counts.ts): one INCRBY per
// descriptor and no script, the key naming the window's start, its expiry set once by the call that
// made it; on a redis-server of its own, so that INFO commandstats counts this test's commands only.
import type { Redis } from "ioredis";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import type { Limiter } from "../../src/ratelimit/limiter.js";
import type { Rule } from "../../src/ratelimit/types.js";
import { createKeys } from "../../src/store/redis/keys.js";
import { redisLimiter } from "../support/limiters.js";
import { type RedisServer, startRedisServer } from "../support/processes.mjs";
import { connectRedis } from "../support/redis.js";

const PREFIX = "wc:";
const MINUTE: Rule = { algorithm: "fixed-window", windows: [{ limit: 5, windowMs: 60_000 }] };
const LOG: Rule = { algorithm: "sliding-log", windows: [{ limit: 5, windowMs: 60_000 }] };
/** A minute's start, plus 15 s. */
const T0 = 1_700_000_040_000 + 15_000;

let server: RedisServer;
let redis: Redis;
let limiter: Limiter;
let now = T0;

beforeAll(async () => {
  server = await startRedisServer();
  redis = connectRedis(server.url);
  limiter = redisLimiter({ redis, keys: createKeys(PREFIX), clock: () => now });
  // The functions load on the first call (a "Function not found" FCALL first): before the counts.
  await limiter.limit({ layers: [{ subject: "rls:warm", category: "c", rule: LOG }] });
});
afterAll(async () => {
  redis.disconnect();
  await server.stop();
});
beforeEach(async () => {
  now = T0;
  await redis.flushall();
  await redis.config("RESETSTAT");
});

/** Calls per command since the last RESETSTAT (INFO commandstats), without INFO and CONFIG themselves. */
async function commands(): Promise<Record<string, number>> {
  const info = await redis.info("commandstats");
  const calls: Record<string, number> = {};
  for (const m of info.matchAll(/^cmdstat_([a-z_|]+):calls=(\d+)/gm)) {
    if (!["info", "config|resetstat", "flushall"].includes(m[1] as string))
      calls[m[1] as string] = Number(m[2]);
  }
  return calls;
}

const each = (layers: { category: string; rule: Rule }[], addend = 1) =>
  limiter.limit({ layers: layers.map((l) => ({ ...l, subject: "rls:d|k=v" })), addend, mode: "each" });

describe("the reference's fixed window on Redis", () => {
  it("counts with INCRBY alone: PEXPIRE once, by the call that made the key; no script", async () => {
    await each([{ category: "c", rule: MINUTE }]);
    await each([{ category: "c", rule: MINUTE }], 2);
    // The expiry is sent after the answer, without waiting for it.
    await redis.ping();
    expect(await commands()).toEqual({ incrby: 2, pexpire: 1, ping: 1 });
  });

  it("keys the window by its start; the key outlives the window by a minute at most", async () => {
    const start = T0 - 15_000;
    await each([{ category: "c", rule: MINUTE }]);
    const key = `${PREFIX}{rls:d|k=v}:w:c:${start}`;
    await redis.ping();
    expect(await redis.get(key)).toBe("1");
    const ttl = await redis.pttl(key);
    // 45 s to the window's end, then the margin (a minute, at most the window).
    expect(ttl).toBeGreaterThan(105_000 - 1_000);
    expect(ttl).toBeLessThanOrEqual(105_000);
  });

  it("a key left without expiry (a process that died before its PEXPIRE) changes no later answer", async () => {
    const previous = T0 - 15_000 - 60_000;
    await redis.set(`${PREFIX}{rls:d|k=v}:w:c:${previous}`, "1000");
    const answer = await each([{ category: "c", rule: MINUTE }]);
    expect(answer.kind === "limited" && answer.layers[0]?.windows[0]).toMatchObject({
      used: 1,
      remaining: 4,
    });
  });

  it("a PEXPIRE that fails is sent again a second later", async () => {
    // A user that may count but not (yet) set an expiry: its PEXPIRE fails with NOPERM.
    await redis.call("ACL", "SETUSER", "wc", "on", ">wc-secret", "~*", "+@all", "-pexpire");
    const limited = connectRedis(server.url.replace("redis://", "redis://wc:wc-secret@"));
    try {
      const counter = redisLimiter({ redis: limited, keys: createKeys(PREFIX), clock: () => now });
      await counter.limit({
        layers: [{ subject: "rls:d|k=v", category: "retry", rule: MINUTE }],
        mode: "each",
      });
      const key = `${PREFIX}{rls:d|k=v}:w:retry:${T0 - 15_000}`;
      await limited.ping();
      expect(await redis.pttl(key)).toBe(-1);
      await redis.call("ACL", "SETUSER", "wc", "+pexpire");
      await new Promise((resolve) => setTimeout(resolve, 1_500));
      expect(await redis.pttl(key)).toBeGreaterThan(100_000);
    } finally {
      limited.disconnect();
      await redis.call("ACL", "DELUSER", "wc");
    }
  });

  it("an addend of 0 reads with GET and makes no key", async () => {
    await each([{ category: "c", rule: MINUTE }], 0);
    expect(await commands()).toEqual({ get: 1 });
    expect(await redis.dbsize()).toBe(0);
  });

  it("beside another algorithm's layer: one FCALL for it, one INCRBY for the window, answers in order", async () => {
    const answer = await each([
      { category: "log", rule: LOG },
      { category: "c", rule: MINUTE },
      { category: "log2", rule: LOG },
    ]);
    expect(answer.kind).toBe("limited");
    if (answer.kind !== "limited") return;
    expect(answer.layers.map((l) => [l.room, l.counted, l.windows[0]?.used])).toEqual([
      [true, true, 1],
      [true, true, 1],
      [true, true, 1],
    ]);
    const calls = await commands();
    expect(calls.fcall).toBe(1);
    expect(calls.incrby).toBe(1);
  });

  it("one round trip: a call's INCRBYs and its script reach Redis in one read", async () => {
    const reads = async () => Number(/total_reads_processed:(\d+)/.exec(await redis.info("stats"))?.[1]);
    const layers = [
      { category: "a", rule: MINUTE },
      { category: "log", rule: LOG },
      { category: "b", rule: MINUTE },
      { category: "c", rule: MINUTE },
    ];
    await each(layers);
    for (let i = 0; i < 5; i += 1) {
      const before = await reads();
      await each(layers);
      // The call's one read, and the second INFO's own.
      expect((await reads()) - before).toBe(2);
    }
  });

  it("all-or-none keeps the fixed window in the script", async () => {
    await limiter.limit({ layers: [{ subject: "rls:d|k=v", category: "c", rule: MINUTE }] });
    const calls = await commands();
    expect(calls.fcall).toBe(1);
    expect(calls.incrby).toBeUndefined();
  });
});
