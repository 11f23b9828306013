// A sliding-log list's expiry on Redis: the list must outlive its newest entry by a window, whatever
// happened to it meanwhile, and the scripts read its TTL only when what they last learned of it has
// run out (lua/includes/layer.lua's extend_log). Every path that pushes: the user check's usual
// window, the address's, and the general way (several windows).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { TierRules } from "../../src/config/rules.js";
import { type Layer, logRule, userSubject } from "../../src/ratelimit/types.js";
import { createKeys } from "../../src/store/redis/keys.js";
import { createRedisStore } from "../../src/store/store.js";
import { redisLimiter, userChecks } from "../support/limiters.js";
import { monitorRedis } from "../support/local.mjs";
import { startRedisServer } from "../support/processes.mjs";
import { connectRedis, testPrefix, userWithSession } from "../support/redis.js";

// A Redis of its own: what the function library learned of a list is the library's, and another
// file's checks on a shared Redis (filling its bounded memory, reloading it) would change what
// this file counts.
const server = await startRedisServer();
const prefix = testPrefix();
const keys = createKeys(prefix);
const redis = connectRedis(server.url);
const store = createRedisStore({ redis, prefix });
const authorizer = userChecks(redisLimiter({ redis, keys }));
const limits = redisLimiter({ redis, keys });

// The scripts' PTTL reads and expiries set per key, from MONITOR (only what scripts ran, not this
// test's reads). An expiry is recorded as the whole seconds it gives: PEXPIRE's, or PEXPIREAT's
// (with Redis's clock the scripts set it as an absolute time) less the time it arrives here.
const seen = new Map<string, { pttl: number; pexpire: string[] }>();
let monitor: { close(): void };
beforeAll(async () => {
  monitor = await monitorRedis(server.url, (args: string[], source: string) => {
    const command = String(args[0]).toLowerCase();
    if (source !== "lua" || !["pttl", "pexpire", "pexpireat"].includes(command)) return;
    const key = String(args[1]);
    const entry = seen.get(key) ?? { pttl: 0, pexpire: [] };
    if (command === "pttl") entry.pttl += 1;
    else {
      const ms = command === "pexpire" ? Number(args[2]) : Number(args[2]) - Date.now();
      entry.pexpire.push(`${Math.round(ms / 1_000)} s`);
    }
    seen.set(key, entry);
  });
});
afterAll(async () => {
  monitor.close();
  await redis.quit();
  await server.stop();
});

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
/** MONITOR lines arrive a little after the commands: wait for the last one's. */
const settled = async (key: string, pexpires: number) => {
  for (let i = 0; i < 50 && (seen.get(key)?.pexpire.length ?? 0) < pexpires; i += 1) await sleep(20);
  await sleep(50);
  return seen.get(key) ?? { pttl: 0, pexpire: [] };
};

let users = 0;
async function session() {
  users += 1;
  return userWithSession(store, `expiry-${users}`);
}
const rulesOf = (limit: number, windowMs: number): TierRules => new Map([["free", logRule(limit, windowMs)]]);

/** A new user's general window: its list, and a counted check of it under `rules`. */
async function userWindow() {
  const who = await session();
  const list = keys.log(userSubject(who.userId), "general");
  const ask = (rules: TierRules) =>
    authorizer.authorize({
      ...who,
      category: "general",
      rules,
      ip: undefined,
      idleMs: 60_000,
      dryRun: false,
    });
  return { list, ask };
}

/**
 * Checks in a row, timed: how many began later than `afterMs` after the first (only those may read
 * the TTL), how long they took (a list's expiry is moved a second after it was set), and each TTL
 * of `key` right after a check.
 */
async function timed(count: number, afterMs: number, check: () => Promise<unknown>, key: string) {
  const start = Date.now();
  let late = 0;
  const ttls: { ttl: number; sinceCheckMs: number }[] = [];
  for (let i = 0; i < count; i += 1) {
    if (Date.now() - start > afterMs) late += 1;
    ttls.push(await ttlAfter(check, key));
  }
  return { late, ttls, elapsedMs: Date.now() - start };
}

/**
 * `key`'s TTL right after `check`, and how long after the check began it was read: a push that finds
 * the expiry exactly a window away leaves it, so a read that a busy machine delays is short by that
 * delay, never by more.
 */
async function ttlAfter(check: () => Promise<unknown>, key: string) {
  const began = Date.now();
  await check();
  const ttl = await redis.pttl(key);
  return { ttl, sinceCheckMs: Date.now() - began };
}
/** The list outlives its newest entry by a window (`ttlAfter`'s TTLs; 1 ms for the clocks' rounding). */
const expectWindowLeft = (ttls: { ttl: number; sinceCheckMs: number }[], windowMs: number) => {
  for (const { ttl, sinceCheckMs } of ttls) expect(ttl).toBeGreaterThanOrEqual(windowMs - sinceCheckMs - 1);
};
const expectWindowAfter = async (check: () => Promise<unknown>, key: string, windowMs: number) =>
  expectWindowLeft([await ttlAfter(check, key)], windowMs);
/** The expiries set: the first at the list's creation, then at most one per second of checks. */
const expectSets = (pexpire: string[], set: string, elapsedMs: number) => {
  expect(pexpire[0]).toBe(set);
  expect(new Set(pexpire)).toEqual(new Set([set]));
  expect(pexpire.length - 1).toBeLessThanOrEqual(Math.floor(elapsedMs / 1_000));
};

describe("a sliding-log list's expiry", () => {
  it("is set once for a busy user window, and read only after what was learned of it ran out", async () => {
    const windowMs = 100_000;
    const window = await userWindow();
    const list = window.list;
    const ask = () => window.ask(rulesOf(1_000, windowMs));
    // Set at the creation to a window and a second; known from then on for half that second.
    const { late, ttls, elapsedMs } = await timed(40, 400, ask, list);
    const { pttl, pexpire } = await settled(list, 1);
    expectSets(pexpire, "101 s", elapsedMs);
    expect(pttl).toBeLessThanOrEqual(late);
    expectWindowLeft(ttls, windowMs);
  });

  it("keeps reading a busy list's TTL about once per slack, not on every push, for as long as it is used", async () => {
    const windowMs = 100_000;
    const window = await userWindow();
    const list = window.list;
    const ask = () => window.ask(rulesOf(100_000, windowMs));
    // Past two slacks of 1 s: each time the expiry is moved (absolute, and so known exactly), the
    // pushes of the next second skip the read; the one or two after it read it and move it.
    const start = Date.now();
    let checks = 0;
    while (Date.now() - start < 2_300) {
      await expectWindowAfter(ask, list, windowMs);
      checks += 1;
    }
    const elapsedMs = Date.now() - start;
    const { pttl, pexpire } = await settled(list, 1);
    expect(checks).toBeGreaterThan(20);
    expect(pexpire.length).toBeGreaterThanOrEqual(2);
    // About once per slack: the reads cluster where a slack runs out, a few more at thousands of
    // checks a second (on a Redis of its own, 9,829 checks in 2.3 s read 13 times and moved the
    // expiry 3 times: at most 21 here). On every push it would be every check. Not a share of the
    // checks: a starved machine makes a few hundred, and 3 reads were then more than a hundredth.
    const perMs = Math.ceil(checks / elapsedMs);
    expect(pttl).toBeLessThanOrEqual(Math.ceil(elapsedMs / 1_000) * (2 + perMs));
  });

  it("keeps what it learned of a busy list while thousands of other lists come and go (a bounded memo)", async () => {
    // The library keeps two generations of 1,000 entries (lua/includes/prelude.lua): 4,000 other
    // lists pass through it while the busy one is pushed after every 100 of them.
    const windowMs = 100_000;
    const layers: Layer[] = [{ category: "general", rule: logRule(100_000, windowMs) }];
    const busy = `ip:203.0.113.${users + 10}`;
    const key = keys.log(busy, "general");
    await limits.hit(busy, layers);
    const before = (await settled(key, 1)).pttl;
    const start = Date.now();
    let pushes = 1;
    for (let batch = 0; batch < 40; batch += 1) {
      await Promise.all(Array.from({ length: 100 }, (_, i) => limits.hit(`ip:10.77.${batch}.${i}`, layers)));
      await expectWindowAfter(() => limits.hit(busy, layers), key, windowMs);
      pushes += 1;
    }
    const elapsedMs = Date.now() - start;
    expect(await redis.llen(key)).toBe(pushes);
    await sleep(100);
    // Forgotten, each of its 40 pushes would read the TTL; remembered, about once per slack of 1 s.
    const reads = (seen.get(key)?.pttl ?? 0) - before;
    expect(reads).toBeLessThanOrEqual(2 * Math.ceil(elapsedMs / 1_000));
    expect(reads).toBeLessThan(20);
  });

  it("sets the expiry again, without reading it, for a list deleted meanwhile (a reset)", async () => {
    const windowMs = 100_000;
    const window = await userWindow();
    const list = window.list;
    const ask = () => window.ask(rulesOf(1_000, windowMs));
    await ask();
    await ask();
    await redis.del(list);
    const before = structuredClone(await settled(list, 1));
    await ask();
    expect(await redis.pttl(list)).toBeGreaterThanOrEqual(windowMs - 5);
    const after = await settled(list, before.pexpire.length + 1);
    expect(after.pexpire).toEqual([...before.pexpire, "101 s"]);
    expect(after.pttl).toBe(before.pttl);
  });

  it("does not let what it learned under one window excuse a longer one (a new tier or policy)", async () => {
    const { list, ask } = await userWindow();
    await ask(rulesOf(1_000, 100_000));
    await ask(rulesOf(1_000, 100_000));
    await ask(rulesOf(1_000, 300_000));
    expect(await redis.pttl(list)).toBeGreaterThanOrEqual(300_000 - 5);
    // And back to the shorter window: the longer expiry stays, nothing shortens it.
    await ask(rulesOf(1_000, 100_000));
    expect(await redis.pttl(list)).toBeGreaterThanOrEqual(300_000 - 5_000);
  });

  it("holds for the address's window and for a rule of several windows, through a reset", async () => {
    const one: Layer[] = [{ category: "general", rule: logRule(1_000, 100_000) }];
    const two: Layer[] = [
      {
        category: "search",
        rule: {
          algorithm: "sliding-log",
          windows: [
            { limit: 1_000, windowMs: 100_000 },
            { limit: 5_000, windowMs: 200_000 },
          ],
        },
      },
    ];
    const groups = [
      {
        subject: `ip:192.0.2.${users + 10}`,
        category: "general",
        layers: one,
        windows: [[100_000, "101 s"]],
      },
      {
        subject: `ip:192.0.2.${users + 110}`,
        category: "search",
        layers: two,
        // One list for both windows, kept as long as the longest needs it.
        windows: [[200_000, "201 s"]],
      },
    ] as const;
    for (const { subject, category, layers, windows } of groups) {
      const lists = windows.map(([windowMs, set]) => ({
        key: keys.log(subject, category),
        windowMs,
        set,
      }));
      const key = (lists[0] as (typeof lists)[number]).key;
      const { late, ttls, elapsedMs } = await timed(30, 400, () => limits.hit(subject, [...layers]), key);
      expectWindowLeft(ttls, windows[0]?.[0] ?? 0);
      for (const { key, set } of lists) {
        const now = await settled(key, 1);
        expectSets(now.pexpire, set, elapsedMs);
        expect(now.pttl).toBeLessThanOrEqual(late);
      }
      const before = lists.map(({ key }) => structuredClone(seen.get(key)?.pexpire ?? []));
      await limits.reset(subject, [category]);
      await limits.hit(subject, [...layers]);
      for (const [i, { key, windowMs, set }] of lists.entries()) {
        expect(await redis.pttl(key)).toBeGreaterThanOrEqual(windowMs - 5);
        const was = before[i] ?? [];
        expect((await settled(key, was.length + 1)).pexpire).toEqual([...was, set]);
      }
    }
  });

  it("reads the TTL on every push under a pinned clock (a test's), which expiries do not run on", async () => {
    // An hour behind Redis's clock: what a push with Redis's clock learned would seem to cover it.
    let nowMs = Date.now() - 3_600_000;
    const pinned = redisLimiter({ redis, keys, clock: () => nowMs });
    const subject = `ip:198.51.100.${users + 10}`;
    const layers: Layer[] = [{ category: "general", rule: logRule(1_000, 100_000) }];
    const key = keys.log(subject, "general");
    await limits.hit(subject, layers);
    const before = (await settled(key, 1)).pttl;
    for (let i = 0; i < 10; i += 1) {
      await pinned.hit(subject, layers);
      nowMs += 1;
    }
    expect(await redis.llen(key)).toBe(11);
    await sleep(100);
    expect((seen.get(key)?.pttl ?? 0) - before).toBe(10);
  });
});
