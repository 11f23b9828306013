// Refusals without Redis: a full window answers its 429 from memory, with no Redis command, until
// it frees; whatever frees a subject sooner (reset, tier change, revocation) reaches every instance.
import { randomBytes } from "node:crypto";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createDenialCache, type Refusal } from "../../src/check/denial-cache.js";
import type { Decision } from "../../src/check/types.js";
import { DEFAULT_POLICY_YAML } from "../../src/policy/policy.js";
import { storeTimeouts } from "../../src/store/failure.js";
import { createRedisClient } from "../../src/store/redis/client.js";
import { createRedisInvalidations } from "../../src/store/redis/invalidations.js";
import { startDarkProxy } from "../support/dark-proxy.js";
import { demoToken, type InProcessOnRedis, startInProcess } from "../support/in-process.js";
import { monitorRedis } from "../support/local.mjs";
import { connectRedis, isWatchdogTraffic, redisUrl } from "../support/redis.js";

const HEARTBEAT = storeTimeouts(100).watchdog;

const dir = mkdtempSync(join(tmpdir(), "tollgate-denials-"));
const policyFile = join(dir, "policy.yaml");
// Three searches an hour for free users; everything else as built in.
writeFileSync(
  policyFile,
  DEFAULT_POLICY_YAML.replace(/(free: +\{ general: 100\/1h, +)search: 20\/1h/, "$1search: 3/1h"),
);

let a: InProcessOnRedis;
let b: InProcessOnRedis;

beforeAll(async () => {
  a = await startInProcess({ env: { POLICY_FILE: policyFile } });
  b = await startInProcess({ env: { POLICY_FILE: policyFile }, peerOf: a });
});
afterAll(async () => {
  await b?.close();
  await a?.close();
});

const check = (instance: InProcessOnRedis, token: string, path = "/api/search") =>
  instance.tollgate.checker({ method: "GET", path, authorization: `Bearer ${token}`, ip: "198.51.100.20" });

/**
 * Watches Redis (MONITOR) for commands naming this test's key prefix, so another test file sharing
 * the server cannot add to the count. `count()` waits for a marker to come through first: Redis feeds
 * its monitors in execution order, so every command run before the marker has been seen by then.
 */
async function watchCommands(prefix: string) {
  let seen = 0;
  const markers = new Set<string>();
  const monitor = await monitorRedis(redisUrl(), (args) => {
    if (args[0]?.toLowerCase() === "echo" && args[1] !== undefined) markers.delete(args[1]);
    else if (!isWatchdogTraffic(args) && args.some((arg) => arg.includes(prefix))) seen += 1;
  });
  const probe = connectRedis();
  return {
    async count(): Promise<number> {
      const marker = `marker-${Math.random().toString(36).slice(2)}`;
      markers.add(marker);
      await probe.echo(marker);
      await eventuallyTrue(() => !markers.has(marker));
      return seen;
    },
    close(): void {
      monitor.close();
      probe.disconnect();
    },
  };
}

/** Polls until the decision matches, for at most `ms`: announcements cross Redis, not in this call. */
async function eventually(run: () => Decision | Promise<Decision>, ok: (d: Decision) => boolean, ms = 2_000) {
  const until = Date.now() + ms;
  let last = await run();
  while (!ok(last) && Date.now() < until) {
    await new Promise((r) => setTimeout(r, 10));
    last = await run();
  }
  return last;
}

/** The checks an instance answered from its denial cache so far (its /metrics). */
async function cachedAnswers(instance: InProcessOnRedis): Promise<number> {
  const text = await (await fetch(`${instance.adminUrl}/metrics`)).text();
  return Number(/^tollgate_denial_cache_answers_total (\S+)$/m.exec(text)?.[1] ?? Number.NaN);
}

async function spendSearches(instance: InProcessOnRedis, token: string): Promise<Decision> {
  for (let i = 0; i < 3; i += 1) expect(await check(instance, token)).toMatchObject({ kind: "allow" });
  return check(instance, token);
}

describe("cached refusals", () => {
  it("answers a hammering client's 429s with no Redis command, Retry-After counting down", async () => {
    const token = await demoToken(a.tollgate.auth, "alice");
    await a.redis.del(`${a.prefix}{u:demo-alice}:l:search`);
    const first = await spendSearches(a, token);
    expect(first).toMatchObject({ kind: "deny", status: 429 });
    const watch = await watchCommands(a.prefix);
    // The watch sees this test's commands: one more check of another category is one more command.
    const answers = await Promise.all(Array.from({ length: 200 }, () => check(a, token)));
    expect(await watch.count()).toBe(0);
    for (const answer of answers) {
      expect(answer).toMatchObject({
        kind: "deny",
        status: 429,
        limit: { category: "search", remaining: 0 },
      });
      if (answer.kind === "deny" && answer.status === 429 && first.kind === "deny" && first.status === 429) {
        expect(answer.limit.retryAfterMs).toBeLessThanOrEqual(first.limit.retryAfterMs);
        expect(answer.limit.retryAfterMs).toBeGreaterThan(first.limit.retryAfterMs - 5_000);
      }
    }
    // Another category of the same user still asks the store, and the watch sees it.
    expect((await check(a, token, "/api/products")).kind).toBe("allow");
    expect(await watch.count()).toBeGreaterThan(0);
    watch.close();
  });

  it("answers 401, not a cached 429, once the session is revoked, on this instance and another", async () => {
    const token = await demoToken(a.tollgate.auth, "bob_pro");
    // bob_pro is pro (200 searches): make him free for this test, then spend them.
    await a.store.users.update("demo-bob", { tier: "free" });
    await a.redis.del(`${a.prefix}{u:demo-bob}:l:search`);
    expect(await spendSearches(a, token)).toMatchObject({ status: 429 });
    expect(await check(b, token)).toMatchObject({ status: 429 });
    const logout = await fetch(`${a.publicUrl}/auth/logout`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}` },
    });
    expect(logout.status).toBe(200);
    expect(await check(a, token)).toMatchObject({ kind: "deny", status: 401, reason: "revoked" });
    expect(
      await eventually(
        () => check(b, token),
        (d) => d.kind === "deny" && d.status === 401,
      ),
    ).toMatchObject({
      status: 401,
    });
    await a.store.users.update("demo-bob", { tier: "pro" });
  });

  it("frees a cached subject on every instance when an admin resets its windows or changes its tier", async () => {
    const token = await demoToken(a.tollgate.auth, "alice");
    await a.redis.del(`${a.prefix}{u:demo-alice}:l:search`);
    expect(await spendSearches(b, token)).toMatchObject({ status: 429 });
    expect(await check(b, token)).toMatchObject({ status: 429 });
    const reset = await fetch(`${a.adminUrl}/admin/users/demo-alice/limits`, {
      method: "DELETE",
      headers: { authorization: `Bearer ${a.adminToken}` },
    });
    expect(reset.status).toBe(200);
    expect(
      await eventually(
        () => check(b, token),
        (d) => d.kind === "allow",
      ),
    ).toMatchObject({ kind: "allow" });
    // That was the first of three again.
    for (let i = 0; i < 2; i += 1) expect(await check(b, token)).toMatchObject({ kind: "allow" });
    expect(await check(b, token)).toMatchObject({ status: 429 });
    const upgrade = await fetch(`${a.adminUrl}/admin/users/demo-alice/tier`, {
      method: "PUT",
      headers: { authorization: `Bearer ${a.adminToken}`, "content-type": "application/json" },
      body: JSON.stringify({ tier: "pro" }),
    });
    expect(upgrade.status).toBe(200);
    expect(
      await eventually(
        () => check(b, token),
        (d) => d.kind === "allow",
      ),
    ).toMatchObject({
      kind: "allow",
      identity: { tier: "pro" },
    });
    await a.store.users.update("demo-alice", { tier: "free" });
  });

  it("caches an address's refusal too, and not a dry run's", async () => {
    const ip = "203.0.113.77";
    const login = () =>
      a.tollgate.checker({ method: "POST", path: "/auth/login", authorization: undefined, ip });
    for (let i = 0; i < 10; i += 1) expect((await login()).kind).toBe("allow");
    expect(await login()).toMatchObject({ status: 429, limit: { category: "login", tier: "anonymous" } });
    const watch = await watchCommands(a.prefix);
    expect(await login()).toMatchObject({ status: 429 });
    expect(await watch.count()).toBe(0);
    // The admin's dry run always asks the store.
    const dry = await a.tollgate.checker(
      { method: "POST", path: "/auth/login", authorization: undefined, ip },
      { dryRun: true },
    );
    expect(dry).toMatchObject({ status: 429 });
    expect(await watch.count()).toBeGreaterThan(0);
    watch.close();
  });
});

describe("the cache itself", () => {
  const denial = (retryAfterMs: number): Refusal => ({
    hit: {
      allowed: false,
      layer: 0,
      window: 0,
      limit: 3,
      windowMs: 60_000,
      used: 3,
      remaining: 0,
      resetAtMs: retryAfterMs,
      retryAfterMs,
    },
    user: undefined,
  });

  it("answers until the window frees, for the sessions it saw, and forgets a subject on an announcement", () => {
    const cache = createDenialCache();
    cache.remember(
      "u:1",
      "search",
      60_000,
      "s1",
      denial(5_000),
      { retryAtMs: 5_000, untilMs: 4_000 },
      cache.generation(),
    );
    expect(cache.lookup("u:1", "search", "s1", 1_000)?.hit.retryAfterMs).toBe(4_000);
    expect(cache.lookup("u:1", "search", "s2", 1_000)).toBeUndefined();
    expect(cache.lookup("u:1", "general", "s1", 1_000)).toBeUndefined();
    expect(cache.lookup("u:1", "search", "s1", 4_000)).toBeUndefined();
    cache.remember(
      "u:1",
      "search",
      60_000,
      "s1",
      denial(5_000),
      { retryAtMs: 5_000, untilMs: 5_000 },
      cache.generation(),
    );
    cache.remember(
      "u:1",
      "search",
      60_000,
      "s2",
      denial(5_000),
      { retryAtMs: 5_000, untilMs: 5_000 },
      cache.generation(),
    );
    expect(cache.lookup("u:1", "search", "s1", 1_000)).toBeDefined();
    expect(cache.lookup("u:1", "search", "s2", 1_000)).toBeDefined();
    cache.invalidate("u:1");
    expect(cache.lookup("u:1", "search", "s1", 1_000)).toBeUndefined();
    expect(cache.size()).toBe(0);
  });

  it("does not remember a store answer older than an announcement, nor anything while it is off", () => {
    const cache = createDenialCache();
    const seen = cache.generation();
    cache.invalidate("u:other");
    cache.remember(
      "ip:1",
      "login",
      60_000,
      undefined,
      denial(1_000),
      { retryAtMs: 1_000, untilMs: 1_000 },
      seen,
    );
    expect(cache.lookup("ip:1", "login", undefined, 0)).toBeUndefined();
    cache.setEnabled(false);
    cache.remember(
      "ip:1",
      "login",
      60_000,
      undefined,
      denial(1_000),
      { retryAtMs: 1_000, untilMs: 1_000 },
      cache.generation(),
    );
    expect(cache.lookup("ip:1", "login", undefined, 0)).toBeUndefined();
    cache.setEnabled(true);
    cache.remember(
      "ip:1",
      "login",
      60_000,
      undefined,
      denial(1_000),
      { retryAtMs: 1_000, untilMs: 1_000 },
      cache.generation(),
    );
    expect(cache.lookup("ip:1", "login", undefined, 0)).toBeDefined();
  });

  it("stays within its size, dropping the oldest subjects first", () => {
    const cache = createDenialCache({ maxEntries: 100 });
    for (let i = 0; i < 1_000; i += 1) {
      cache.remember(
        `ip:${i}`,
        "login",
        60_000,
        undefined,
        denial(1_000),
        { retryAtMs: 9e9, untilMs: 9e9 },
        cache.generation(),
      );
    }
    expect(cache.size()).toBeLessThanOrEqual(100);
    expect(cache.lookup("ip:999", "login", undefined, 0)).toBeDefined();
    expect(cache.lookup("ip:0", "login", undefined, 0)).toBeUndefined();
  });
});

describe("announcements over Redis", () => {
  let redis: Redis;
  beforeAll(() => {
    redis = connectRedis();
  });
  afterAll(() => redis.disconnect());

  it("are awaited before any refusal is trusted: an instance that cannot subscribe caches none, and says it cannot announce", async () => {
    // An ACL user without the channels: its SUBSCRIBE is refused, so it would hear no announcement.
    const name = `tg-nochannels-${randomBytes(4).toString("hex")}`;
    const password = randomBytes(16).toString("hex");
    await redis.call("ACL", "SETUSER", name, "on", `>${password}`, "~*", "resetchannels", "+@all");
    const url = new URL(redisUrl());
    url.username = name;
    url.password = password;
    const deaf = await startInProcess({
      env: { POLICY_FILE: policyFile },
      peerOf: a,
      redis: connectRedis(url.toString()),
    });
    try {
      const user = await a.newUser("free");
      const { access_token: token } = await a.loginOk(user.username, user.password);
      expect(await spendSearches(deaf, token)).toMatchObject({ status: 429 });
      const upgrade = await a.admin("PUT", `/admin/users/${user.id}/tier`, {
        token: a.adminToken,
        json: { tier: "pro" },
      });
      expect(upgrade.status).toBe(200);
      expect(await check(deaf, token)).toMatchObject({ kind: "allow", identity: { tier: "pro" } });
      // Its own changes cannot be announced: made, but answered 503 at once, never as if announced.
      const started = performance.now();
      const own = await deaf.admin("PUT", `/admin/users/${user.id}/tier`, {
        token: deaf.adminToken,
        json: { tier: "enterprise" },
      });
      expect(own.status).toBe(503);
      expect(performance.now() - started).toBeLessThan(1_000);
      expect((await a.store.users.get(user.id))?.tier).toBe("enterprise");
      expect(deaf.logWrites().join("")).toContain("can't publish to the channel");
    } finally {
      await deaf.close();
      await redis.call("ACL", "DELUSER", name);
    }
  });

  it("hold a change's answer until an instance whose subscription went dark no longer trusts its refusals", async () => {
    const url = new URL(redisUrl());
    const proxy = await startDarkProxy({ host: url.hostname, port: Number(url.port) });
    const watchdog = { intervalMs: 100, silenceMs: 600 };
    const dim = await startInProcess({
      env: { POLICY_FILE: policyFile },
      peerOf: a,
      redis: connectRedis(proxy.url),
      watchdog,
    });
    try {
      const user = await a.newUser("free");
      const { access_token: token } = await a.loginOk(user.username, user.password);
      expect(await spendSearches(dim, token)).toMatchObject({ status: 429 });
      // Once its subscription is trusted, its next 429 is remembered, and the one after answered from memory.
      const answered = await cachedAnswers(dim);
      await eventually(
        () => check(dim, token),
        () => false,
        300,
      );
      expect(await cachedAnswers(dim)).toBeGreaterThan(answered);
      // Its client's connection, then its subscriber's: only the subscription goes dark.
      expect(proxy.accepted()).toBe(2);
      proxy.darkenOne(2);
      const started = performance.now();
      const upgrade = await a.admin("PUT", `/admin/users/${user.id}/tier`, {
        token: a.adminToken,
        json: { tier: "pro" },
      });
      expect(upgrade.status).toBe(200);
      expect(await check(dim, token)).toMatchObject({ kind: "allow", identity: { tier: "pro" } });
      // Held no longer than it takes the dark subscription to be distrusted.
      expect(performance.now() - started).toBeLessThan(watchdog.silenceMs + 2 * watchdog.intervalMs + 500);
    } finally {
      await dim.close();
      await proxy.close();
    }
  });

  it("reach another process's listener, and report the listener unhealthy while its connection is down", async () => {
    const channel = `test-announcements-${Math.random().toString(36).slice(2)}`;
    const sender = createRedisInvalidations({
      redis,
      channel,
      peersKey: `{${channel}}:peers`,
      heartbeat: HEARTBEAT,
    });
    // The receiver's client as tollgate makes it (no offline queue), not the tests' own helper,
    // through a proxy that can cut its connections (not the other test files' on the same Redis).
    const url = new URL(redisUrl());
    const proxy = await startDarkProxy({ host: url.hostname, port: Number(url.port) });
    const receiverClient = createRedisClient({ url: proxy.url });
    const receiver = createRedisInvalidations({
      redis: receiverClient,
      channel,
      peersKey: `{${channel}}:peers`,
      heartbeat: HEARTBEAT,
    });
    const got: string[] = [];
    const health: boolean[] = [];
    receiver.subscribe({ message: (s) => got.push(s), health: (h) => health.push(h) });
    await eventuallyTrue(() => health.at(-1) === true);
    await sender.publish("u:42");
    await eventuallyTrue(() => got.includes("u:42"));
    // The receiver's connection is cut: it must say so, then come back by itself.
    const before = health.length;
    proxy.cut();
    await eventuallyTrue(() => health.slice(before).includes(false));
    await eventuallyTrue(() => health.at(-1) === true);
    await sender.publish("u:43");
    await eventuallyTrue(() => got.includes("u:43"));
    await receiver.close();
    receiverClient.disconnect();
    await proxy.close();
  });
});

describe("an announcement's wait", () => {
  it("ends once every instance listed has dropped the subject, however late its subscription hears it, and not for one that left", async () => {
    const channel = `test-wait-${Math.random().toString(36).slice(2)}`;
    const peersKey = `{${channel}}:peers`;
    const senderClient = createRedisClient({ url: redisUrl() });
    const sender = createRedisInvalidations({ redis: senderClient, channel, peersKey, heartbeat: HEARTBEAT });
    const url = new URL(redisUrl());
    const proxy = await startDarkProxy({ host: url.hostname, port: Number(url.port) });
    const receiverClient = createRedisClient({ url: proxy.url });
    const receiver = createRedisInvalidations({
      redis: receiverClient,
      channel,
      peersKey,
      heartbeat: HEARTBEAT,
    });
    const got: string[] = [];
    const healthy = { sender: false, receiver: false };
    sender.subscribe({ message: () => undefined, health: (h) => (healthy.sender = h) });
    receiver.subscribe({ message: (s) => got.push(s), health: (h) => (healthy.receiver = h) });
    try {
      await eventuallyTrue(() => healthy.sender && healthy.receiver);
      // Everything the receiver hears comes 50 ms late: the sender's answer must not come sooner.
      proxy.slowReplies(50, 50);
      for (const subject of ["u:1", "k:2", "*"]) {
        await sender.publish(subject);
        expect(got).toContain(subject);
      }
      proxy.slowReplies(0, 0);
      await receiver.close();
      const started = performance.now();
      await sender.publish("u:3");
      expect(performance.now() - started).toBeLessThan(HEARTBEAT.intervalMs);
    } finally {
      await receiver.close();
      await sender.close();
      receiverClient.disconnect();
      senderClient.disconnect();
      await proxy.close();
    }
  });
});

async function eventuallyTrue(ok: () => boolean, ms = 5_000): Promise<void> {
  const until = Date.now() + ms;
  while (!ok()) {
    if (Date.now() > until) throw new Error("condition not reached in time");
    await new Promise((r) => setTimeout(r, 10));
  }
}
