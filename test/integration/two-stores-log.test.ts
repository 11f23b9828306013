// The sliding log on Redis through two stores (two tollgate processes) sharing one window: exactly the
// limit passes, a refusal says what a refusal by one store says, a window filled by the other store
// refuses with the right wait, and nothing refused is recorded: the user's check and the address's.
import type { Redis } from "ioredis";
import { afterAll, describe, expect, it } from "vitest";
import type { UserAnswer as AuthorizeResult } from "../../src/check/types.js";
import type { TierRules } from "../../src/config/rules.js";
import { type Layer, logRule, userSubject } from "../../src/ratelimit/types.js";
import { createKeys } from "../../src/store/redis/keys.js";
import { createRedisStore } from "../../src/store/store.js";
import { redisLimiter, userChecks } from "../support/limiters.js";
import { connectRedis, testPrefix, userWithSession } from "../support/redis.js";

const prefix = testPrefix();
const keys = createKeys(prefix);
const clients: Redis[] = [connectRedis(), connectRedis()];
const [redisA, redisB] = clients as [Redis, Redis];
const store = createRedisStore({ redis: redisA, prefix });
// Two tollgate processes' stores, each with its own guesses.
const storeA = userChecks(redisLimiter({ redis: redisA, keys }));
const storeB = userChecks(redisLimiter({ redis: redisB, keys }));
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

afterAll(async () => {
  await Promise.all(clients.map((c) => c.quit()));
});

let users = 0;
function session() {
  users += 1;
  return userWithSession(store, `hopeful-${users}`);
}

type Who = Awaited<ReturnType<typeof session>>;
const rulesOf = (limit: number, windowMs: number): TierRules => new Map([["free", logRule(limit, windowMs)]]);
const ask = (via: typeof storeA, who: Who, rules: TierRules, dryRun = false) =>
  via.authorize({ ...who, category: "general", rules, ip: undefined, idleMs: 60_000, dryRun });
const hitOf = (result: AuthorizeResult) => {
  if (result.kind !== "ok") throw new Error(`expected an answer, got ${result.kind}`);
  return result.hit;
};
const list = (who: Who) => keys.log(userSubject(who.userId), "general");

describe("the user check's sliding log through two stores", () => {
  it("lets exactly the limit through two stores that both expect room, and records no refused request", async () => {
    const who = await session();
    const rules = rulesOf(100, 60_000);
    // One allowed answer each: from now on both stores expect room for this window.
    expect(hitOf(await ask(storeA, who, rules))).toMatchObject({ allowed: true, remaining: 99 });
    expect(hitOf(await ask(storeB, who, rules))).toMatchObject({ allowed: true, remaining: 98 });
    const burst = await Promise.all(
      Array.from({ length: 400 }, (_, i) => ask(i % 2 === 0 ? storeA : storeB, who, rules)),
    );
    const hits = burst.map(hitOf);
    expect(hits.filter((h) => h.allowed)).toHaveLength(98);
    expect(await redisA.llen(list(who))).toBe(100);
    // The remaining counts of the allowed answers are each value from 97 down to 0 exactly once.
    const remaining = hits.filter((h) => h.allowed).map((h) => h.remaining);
    expect(remaining.sort((a, b) => b - a)).toEqual(Array.from({ length: 98 }, (_, i) => 97 - i));
    // A refusal after a wrong guess says what a refusal without a guess says.
    const refused = hits.filter((h) => !h.allowed);
    const plain = hitOf(await ask(storeA, who, rules));
    for (const h of refused) {
      expect(h).toMatchObject({ allowed: false, used: 100, remaining: 0, limit: 100 });
      expect(h.resetAtMs).toBe(plain.resetAtMs);
      expect(Math.abs(h.retryAfterMs - plain.retryAfterMs)).toBeLessThan(1_000);
    }
    expect(await redisA.llen(list(who))).toBe(100);
  });

  it("takes back a request that found the window filled by the other store", async () => {
    const who = await session();
    const rules = rulesOf(3, 60_000);
    expect(hitOf(await ask(storeA, who, rules))).toMatchObject({ allowed: true, remaining: 2 });
    // storeA expects room; storeB fills the window meanwhile.
    expect(hitOf(await ask(storeB, who, rules)).allowed).toBe(true);
    expect(hitOf(await ask(storeB, who, rules))).toMatchObject({ allowed: true, remaining: 0 });
    const refused = hitOf(await ask(storeA, who, rules));
    expect(refused).toMatchObject({ allowed: false, used: 3, remaining: 0 });
    expect(refused.retryAfterMs).toBeGreaterThan(59_000);
    expect(await redisA.llen(list(who))).toBe(3);
  });

  it("refuses with the right wait when the window holds more than a lowered limit", async () => {
    const who = await session();
    const wide = rulesOf(10, 60_000);
    for (let i = 0; i < 6; i += 1) expect(hitOf(await ask(storeA, who, wide)).allowed).toBe(true);
    // storeA expects room; the limit is lowered to 4 under it (a policy reload).
    const narrow = rulesOf(4, 60_000);
    const refused = hitOf(await ask(storeA, who, narrow));
    expect(refused).toMatchObject({ allowed: false, used: 6, remaining: 0, limit: 4 });
    // The 3rd oldest of six entries must leave before a 5th fits: a later time than the oldest's.
    const oldest = Number(await redisA.lindex(list(who), 0));
    const third = Number(await redisA.lindex(list(who), 2));
    expect(third).toBeGreaterThan(oldest);
    expect(refused.retryAfterMs).toBeGreaterThan(59_000);
    expect(await redisA.llen(list(who))).toBe(6);
    const plain = hitOf(await ask(storeA, who, narrow));
    expect(Math.abs(refused.retryAfterMs - plain.retryAfterMs)).toBeLessThan(1_000);
  });

  it("drops what left the window, however much, before counting", async () => {
    const rules = rulesOf(10, 1_000);
    // The only entry stale.
    const one = await session();
    expect(hitOf(await ask(storeA, one, rules)).remaining).toBe(9);
    await sleep(1_100);
    expect(hitOf(await ask(storeA, one, rules))).toMatchObject({ allowed: true, used: 1, remaining: 9 });
    expect(await redisA.llen(list(one))).toBe(1);
    expect(await redisA.pttl(list(one))).toBeGreaterThan(900);
    // The oldest of two stale.
    const two = await session();
    await ask(storeA, two, rules);
    await sleep(600);
    await ask(storeA, two, rules);
    await sleep(500);
    expect(hitOf(await ask(storeA, two, rules))).toMatchObject({ allowed: true, used: 2, remaining: 8 });
    expect(await redisA.llen(list(two))).toBe(2);
    // Three of six stale, found by galloping.
    const six = await session();
    for (let i = 0; i < 3; i += 1) await ask(storeA, six, rules);
    await sleep(600);
    for (let i = 0; i < 3; i += 1) await ask(storeA, six, rules);
    await sleep(500);
    expect(hitOf(await ask(storeA, six, rules))).toMatchObject({ allowed: true, used: 4, remaining: 6 });
    expect(await redisA.llen(list(six))).toBe(4);
    // All of five stale: the list is made anew, with an expiry.
    const all = await session();
    for (let i = 0; i < 5; i += 1) await ask(storeA, all, rules);
    await sleep(1_100);
    expect(hitOf(await ask(storeA, all, rules))).toMatchObject({ allowed: true, used: 1, remaining: 9 });
    expect(await redisA.llen(list(all))).toBe(1);
    expect(await redisA.pttl(list(all))).toBeGreaterThan(900);
  });

  it("counts nothing on a dry run, whatever the store expects", async () => {
    const who = await session();
    const rules = rulesOf(5, 60_000);
    await ask(storeA, who, rules);
    expect(hitOf(await ask(storeA, who, rules, true))).toMatchObject({
      allowed: true,
      used: 2,
      remaining: 3,
    });
    expect(await redisA.llen(list(who))).toBe(1);
  });
});

describe("an address's sliding log through two stores", () => {
  const limiterA = redisLimiter({ redis: redisA, keys });
  const limiterB = redisLimiter({ redis: redisB, keys });
  const layers = (limit: number): Layer[] => [{ category: "general", rule: logRule(limit, 60_000) }];

  it("lets exactly the limit through two stores that both expect room, and records no refused request", async () => {
    const subject = "ip:203.0.113.41";
    expect(await limiterA.hit(subject, layers(100))).toMatchObject({ allowed: true, remaining: 99 });
    expect(await limiterB.hit(subject, layers(100))).toMatchObject({ allowed: true, remaining: 98 });
    const hits = await Promise.all(
      Array.from({ length: 400 }, (_, i) => (i % 2 === 0 ? limiterA : limiterB).hit(subject, layers(100))),
    );
    expect(hits.filter((h) => h.allowed)).toHaveLength(98);
    expect(await redisA.llen(keys.log(subject, "general"))).toBe(100);
    // A refusal of the burst says what a refusal now says.
    const plain = await limiterA.hit(subject, layers(100));
    for (const h of hits.filter((x) => !x.allowed)) {
      expect(h).toMatchObject({ allowed: false, used: 100, remaining: 0, resetAtMs: plain.resetAtMs });
    }
  });

  it("takes back a request that found the window filled by the other store", async () => {
    const subject = "ip:203.0.113.42";
    expect(await limiterA.hit(subject, layers(2))).toMatchObject({ allowed: true, remaining: 1 });
    expect(await limiterB.hit(subject, layers(2))).toMatchObject({ allowed: true, remaining: 0 });
    expect(await limiterA.hit(subject, layers(2))).toMatchObject({ allowed: false, used: 2, remaining: 0 });
    expect(await redisA.llen(keys.log(subject, "general"))).toBe(2);
  });
});
