// Identity on a real redis-server: the shared contract, plus what only Redis shows (its data model,
// hashed passwords, and sessions shared by every tollgate instance).

import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { allUsers } from "../../src/auth/users-sync.js";
import { createRedisClient } from "../../src/store/redis/client.js";
import { createRedisStore } from "../../src/store/store.js";
import { describeIdentityContract } from "../contract/identity-contract.js";
import type { MeBody } from "../support/http-client.mjs";
import { type InProcess, startInProcess } from "../support/in-process.js";
import { userChecks } from "../support/limiters.js";
import { monitorRedis } from "../support/local.mjs";
import { startRedisServer } from "../support/processes.mjs";
import { connectRedis, redisUrl, testPrefix } from "../support/redis.js";
import { ADMIN_TOKEN } from "../support/secrets.mjs";

describeIdentityContract("redis", () => createRedisStore({ redis: connectRedis(), prefix: testPrefix() }));

describe("identity on redis", () => {
  const prefix = testPrefix();
  const redis = connectRedis();
  const instances: InProcess[] = [];
  let t: InProcess;
  const startOnPrefix = async (): Promise<InProcess> => {
    const running = await startInProcess({
      store: createRedisStore({ redis: connectRedis(), prefix }),
      env: { LOG_LEVEL: "silent" },
    });
    instances.push(running);
    return running;
  };
  beforeAll(async () => {
    t = await startOnPrefix();
  });
  afterAll(async () => {
    for (const running of instances) {
      await running.close();
      await running.store.close();
    }
    await redis.quit();
  });

  const userKey = (id: string) => `${prefix}{u:${id}}:user`;
  const scanAll = async (pattern: string): Promise<string[]> => {
    const found: string[] = [];
    let cursor = "0";
    do {
      const [next, keys] = await redis.scan(cursor, "MATCH", pattern, "COUNT", 1000);
      found.push(...keys);
      cursor = next;
    } while (cursor !== "0");
    return found.sort();
  };

  it("stores passwords as salted scrypt hashes, never as text", async () => {
    const password = "correct horse battery staple";
    const ids: string[] = [];
    for (const username of [`pw_a_${prefix.slice(5, 13)}`, `pw_b_${prefix.slice(5, 13)}`]) {
      const created = await t.admin<{ user_id: string }>("POST", "/admin/users", {
        token: ADMIN_TOKEN,
        json: { username, password, tier: "free" },
      });
      expect(created.status).toBe(201);
      ids.push(created.body.user_id);
    }
    const hashes = await Promise.all(ids.map((id) => redis.hget(userKey(id), "pw")));
    for (const hash of hashes) {
      expect(hash).toMatch(/^scrypt\$/);
      expect(hash).not.toContain(password);
    }
    // Salted: one password, two different hashes.
    expect(hashes[0]).not.toBe(hashes[1]);
    const alice = await redis.hgetall(userKey("demo-alice"));
    expect(alice.pw).toMatch(/^scrypt\$/);
    expect(alice.pw).not.toContain("secret");
    expect(Object.values(alice).join(" ")).not.toContain("secret");
  });

  it("keeps a user's profile, session index, sessions and windows under the prefix and one hash tag", async () => {
    const user = await t.newUser();
    const login = await t.loginOk(user.username, user.password, { device: "phone" });
    await t.check(login.access_token);
    const tag = `${prefix}{u:${user.id}}`;
    expect(await scanAll(`${tag}*`)).toEqual(
      [`${tag}:s:${login.session_id}`, `${tag}:sessions`, `${tag}:user`, `${tag}:l:search`].sort(),
    );
    const session = await redis.hgetall(`${tag}:s:${login.session_id}`);
    expect(session).toMatchObject({ dev: "phone", ip: "198.51.100.7", ua: "identity-contract/1.0" });
    expect(Number(session.exp) - Number(session.created)).toBe(86_400_000);
    // Field last, next to v, for processes of an older build during a rolling upgrade.
    expect(session.last).toBe(session.created);
    expect(session.v).toBe(`${session.created}${session.exp}4free`);
    // The idle lifetime is the session key's own TTL; the index outlives no session.
    const sessionTtl = await redis.pttl(`${tag}:s:${login.session_id}`);
    expect(sessionTtl).toBeGreaterThan(1_800_000 - 5_000);
    expect(sessionTtl).toBeLessThanOrEqual(1_800_000);
    const indexTtl = await redis.pttl(`${tag}:sessions`);
    expect(indexTtl).toBeGreaterThan(86_400_000 - 5_000);
    expect(indexTtl).toBeLessThanOrEqual(86_400_000);
    // A window past the newest entry, plus a slack of a hundredth of the window (at most 1 s), so
    // that a busy list's expiry is not rewritten on every request.
    expect(await redis.pttl(`${tag}:l:search`)).toBeLessThanOrEqual(3_601_000);
    expect(await redis.pttl(`${tag}:l:search`)).toBeGreaterThan(3_600_000 - 5_000);
    expect(await redis.pttl(`${tag}:user`)).toBe(-1);
  });

  it("gives every key a hash tag, and a TTL to every key but users and their name index", async () => {
    const user = await t.newUser();
    await t.login(user.username, "wrong password");
    await t.loginOk(user.username, user.password);
    const keys = await scanAll(`${prefix}*`);
    expect(keys.length).toBeGreaterThan(5);
    for (const key of keys) {
      if (key === `${prefix}users:exist`) continue;
      expect(key, key).toMatch(
        new RegExp(
          `^${prefix.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}\\{((u|n|ip):[^{}]+|users|invalidations)\\}:`,
        ),
      );
      // Users, their name index and the user-id index live until a user is deleted.
      const permanent = /\}:(user|uid|ids)$/.test(key);
      const ttl = await redis.pttl(key);
      if (permanent) expect(ttl, key).toBe(-1);
      else expect(ttl, key).toBeGreaterThan(0);
    }
  });

  it("deletes a session's keys on logout, and the index with every session on logout-all", async () => {
    const user = await t.newUser();
    const tag = `${prefix}{u:${user.id}}`;
    const a = await t.loginOk(user.username, user.password);
    const b = await t.loginOk(user.username, user.password);
    const c = await t.loginOk(user.username, user.password);
    expect((await t.api("POST", "/auth/logout", { token: a.access_token })).status).toBe(200);
    expect(await redis.exists(`${tag}:s:${a.session_id}`)).toBe(0);
    expect(await redis.zrange(`${tag}:sessions`, 0, -1)).toEqual([b.session_id, c.session_id]);
    expect((await t.api("POST", "/auth/logout-all", { token: b.access_token })).status).toBe(200);
    expect(await scanAll(`${tag}*`)).toEqual([`${tag}:user`]);
  });

  it("lists users from before the listing index once they are changed", async () => {
    const user = await t.newUser();
    // As a store written by an older tollgate: the user hash without its index entry.
    await redis.zrem(`${prefix}{users}:ids`, user.id);
    const listed = async (): Promise<string[]> => {
      const ids: string[] = [];
      for await (const u of allUsers(t.store.users)) ids.push(u.id);
      return ids;
    };
    expect(await listed()).not.toContain(user.id);
    const changed = await t.admin("PUT", `/admin/users/${user.id}/tier`, {
      token: ADMIN_TOKEN,
      json: { tier: "pro" },
    });
    expect(changed.status).toBe(200);
    expect(await listed()).toContain(user.id);
  });

  it("shares sessions and tiers between tollgate instances on one Redis", async () => {
    const other = await startOnPrefix();
    const user = await t.newUser();
    const login = await t.loginOk(user.username, user.password);
    expect((await other.api<MeBody>("GET", "/me", { token: login.access_token })).status).toBe(200);
    const changed = await other.admin("PUT", `/admin/users/${user.id}/tier`, {
      token: ADMIN_TOKEN,
      json: { tier: "enterprise" },
    });
    expect(changed.status).toBe(200);
    expect((await t.api<MeBody>("GET", "/me", { token: login.access_token })).body.tier).toBe("enterprise");
    expect((await other.api("POST", "/auth/logout", { token: login.access_token })).status).toBe(200);
    expect((await t.api("GET", "/me", { token: login.access_token })).status).toBe(401);
    expect(await t.check(login.access_token)).toMatchObject({ kind: "deny", status: 401 });
  });
});

describe("sessions carrying their user's fields (one hash read per check)", () => {
  const prefix = testPrefix();
  const redis = connectRedis();
  const store = createRedisStore({ redis: connectRedis(), prefix });
  afterAll(async () => {
    await store.close();
    await redis.quit();
  });
  const lifetimes = { idleMs: 600_000, maxAgeMs: 3_600_000, maxPerUser: 5 };
  const rules = new Map([
    ["free", { algorithm: "sliding-log" as const, windows: [{ limit: 5, windowMs: 60_000 }] }],
    ["pro", { algorithm: "sliding-log" as const, windows: [{ limit: 50, windowMs: 60_000 }] }],
  ]);
  const newSession = async () => {
    const user = await store.users.create({
      username: `carry_${randomBytes(4).toString("hex")}`,
      tier: "free",
      passwordHash: "h",
    });
    if (user === "exists") throw new Error("exists");
    const created = await store.sessions.create(
      { userId: user.id, deviceName: "d", ip: "192.0.2.1", userAgent: "a", passwordHash: "h" },
      lifetimes,
    );
    if (created === "refused") throw new Error("refused");
    return {
      user,
      sessionId: created.session.sessionId,
      key: `${prefix}{u:${user.id}}:s:${created.session.sessionId}`,
    };
  };
  const check = (userId: string, sessionId: string) =>
    userChecks(store.unguarded.limiter).authorize({
      userId,
      sessionId,
      category: "general",
      rules,
      ip: undefined,
      idleMs: lifetimes.idleMs,
      dryRun: false,
    });

  it("copies tier and own windows into every live session on each change, and never revives an expired one", async () => {
    const { user, sessionId, key } = await newSession();
    // v after the renewal time and expiry (13 digits each) and the tier's length character.
    const view = async () => (await redis.hget(key, "v"))?.slice(27);
    expect(await view()).toBe("free");
    expect(
      await store.users.update(user.id, {
        tier: "pro",
        limits: { general: [{ limit: 7, windowMs: 1_000 }] },
      }),
    ).toBe(true);
    expect(await view()).toBe("pro\ngeneral=7/1000000");
    const answer = await check(user.id, sessionId);
    expect(answer).toMatchObject({ kind: "ok", tier: "pro", hit: { allowed: true, limit: 7 } });
    expect(await store.users.update(user.id, { limits: { general: null } })).toBe(true);
    expect(await view()).toBe("pro");
    expect(await check(user.id, sessionId)).toMatchObject({ kind: "ok", hit: { limit: 50 } });
    // A session gone by itself stays gone: the change must not recreate its hash without a TTL.
    const other = await newSession();
    await redis.del(other.key);
    expect(await store.users.update(other.user.id, { tier: "pro" })).toBe(true);
    expect(await redis.exists(other.key)).toBe(0);
  });

  it("moves a busy list's expiry only when it falls short, never below a window past the newest entry", async () => {
    const { user, sessionId } = await newSession();
    const list = `${prefix}{u:${user.id}}:l:general`;
    const windowMs = 100_000;
    const long = new Map([
      ["free", { algorithm: "sliding-log" as const, windows: [{ limit: 1_000, windowMs }] }],
    ]);
    const expiries: string[] = [];
    const marker = `marker-${randomBytes(4).toString("hex")}`;
    let markerSeen = false;
    const monitor = await monitorRedis(redisUrl(), (args) => {
      const command = String(args[0]).toLowerCase();
      if (command === "echo" && args[1] === marker) markerSeen = true;
      if (args[1] !== list) return;
      // With Redis's clock the scripts set it as an absolute time: recorded as the seconds it gives.
      if (command === "pexpire") expiries.push(`${Math.round(Number(args[2]) / 1_000)} s`);
      if (command === "pexpireat") expiries.push(`${Math.round((Number(args[2]) - Date.now()) / 1_000)} s`);
    });
    // Each TTL is read after its check: by then the newest entry may be that much older, never more.
    const ttls: { ttl: number; sinceCheckMs: number }[] = [];
    const start = Date.now();
    for (let i = 0; i < 30; i += 1) {
      const checked = Date.now();
      const answer = await userChecks(store.unguarded.limiter).authorize({
        userId: user.id,
        sessionId,
        category: "general",
        rules: long,
        ip: undefined,
        idleMs: lifetimes.idleMs,
        dryRun: false,
      });
      expect(answer).toMatchObject({ kind: "ok", hit: { allowed: true } });
      const ttl = await redis.pttl(list);
      ttls.push({ ttl, sinceCheckMs: Date.now() - checked });
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    const elapsedMs = Date.now() - start;
    // Redis feeds its monitors in execution order: once this marker is seen, so is every expiry.
    await redis.echo(marker);
    await vi.waitUntil(() => markerSeen, { timeout: 5_000, interval: 10 });
    monitor.close();
    // Set at the list's creation to a window plus a hundredth of it (at most 1 s); the later checks
    // within that slack leave it, so it moves at most once per second the checks took (on a starved
    // machine the 30 checks take more than that second).
    expect(expiries[0]).toBe("101 s");
    expect(new Set(expiries)).toEqual(new Set(["101 s"]));
    expect(expiries.length - 1).toBeLessThanOrEqual(Math.floor(elapsedMs / 1_000));
    for (const { ttl, sinceCheckMs } of ttls) expect(ttl).toBeGreaterThanOrEqual(windowMs - sinceCheckMs - 1);
  });

  it("deletes a user's sessions and their index in the step that deletes the user, revoked before or not", async () => {
    const { user, sessionId, key } = await newSession();
    expect(await check(user.id, sessionId)).toMatchObject({ kind: "ok" });
    expect(await store.users.remove(user.id)).toBe(true);
    expect(await redis.exists(key, `${prefix}{u:${user.id}}:sessions`)).toBe(0);
    expect(await check(user.id, sessionId)).toEqual({ kind: "no_session" });
    expect(await store.sessions.touch(user.id, sessionId, lifetimes.idleMs)).toEqual({ kind: "no_session" });
    expect(await store.sessions.revokeAll(user.id)).toBe(0);
  });

  it("deletes revoked and evicted sessions in the same step as their index entries", async () => {
    const { user, sessionId, key } = await newSession();
    const more = [];
    for (let i = 0; i < lifetimes.maxPerUser; i += 1) {
      // The index orders sessions by their creation millisecond: two logins within the same one
      // have no oldest between them, so each login here comes in a millisecond of its own.
      await new Promise((resolve) => setTimeout(resolve, 2));
      const created = await store.sessions.create(
        { userId: user.id, deviceName: `d${i}`, ip: "192.0.2.1", userAgent: "a", passwordHash: "h" },
        lifetimes,
      );
      if (created === "refused") throw new Error("refused");
      more.push(created.session.sessionId);
    }
    // The sixth login evicted the first session: its hash is gone with its index entry.
    expect(await redis.exists(key)).toBe(0);
    expect(await check(user.id, sessionId)).toEqual({ kind: "no_session" });
    expect(await store.sessions.revokeAll(user.id)).toBe(lifetimes.maxPerUser);
    for (const sid of more) expect(await redis.exists(`${prefix}{u:${user.id}}:s:${sid}`)).toBe(0);
  });

  it("drops a session found past its lifetime from the index, its id read from its key", async () => {
    const { user, sessionId } = await newSession();
    const index = `${prefix}{u:${user.id}}:sessions`;
    const short = await store.sessions.create(
      { userId: user.id, deviceName: "short", ip: "192.0.2.1", userAgent: "a", passwordHash: "h" },
      { ...lifetimes, maxAgeMs: 300, idleMs: 300 },
    );
    if (short === "refused") throw new Error("refused");
    const gone = short.session.sessionId;
    expect((await redis.zrange(index, 0, -1)).sort()).toEqual([sessionId, gone].sort());
    await new Promise((resolve) => setTimeout(resolve, 400));
    expect(await check(user.id, gone)).toEqual({ kind: "no_session" });
    expect(await redis.zrange(index, 0, -1)).toEqual([sessionId]);
    expect(await check(user.id, sessionId)).toMatchObject({ kind: "ok" });
  });

  it("keeps the index as long as its longest-lived session when the absolute lifetime is shortened", async () => {
    const { user, sessionId } = await newSession();
    const index = `${prefix}{u:${user.id}}:sessions`;
    const before = await redis.pttl(index);
    // A restart with a much shorter SESSION_MAX_AGE_SECONDS, then a login.
    const short = await store.sessions.create(
      { userId: user.id, deviceName: "new", ip: "192.0.2.1", userAgent: "a", passwordHash: "h" },
      { ...lifetimes, maxAgeMs: 1_000, idleMs: 1_000 },
    );
    expect(short).not.toBe("refused");
    expect(await redis.pttl(index)).toBeGreaterThan(before - 5_000);
    // The older session is still found, listed and revoked through the index.
    await new Promise((resolve) => setTimeout(resolve, 1_100));
    expect((await store.sessions.list(user.id)).map((s) => s.sessionId)).toEqual([sessionId]);
    expect(await store.sessions.revokeAll(user.id)).toBe(1);
    expect(await check(user.id, sessionId)).toEqual({ kind: "no_session" });
  });
});

describe("a session creation that fails without an answer", () => {
  it("is revoked by its id, so that Redis running it late leaves no session behind", async () => {
    // A Redis of its own: the pause would stall every other test file on the shared one. The
    // client's own command timer (200 ms) fails the creation long before Redis resumes.
    const server = await startRedisServer();
    const client = createRedisClient({ url: server.url, commandTimeoutMs: 200 });
    await new Promise((resolve) => client.once("ready", resolve));
    const store = createRedisStore({ redis: client, prefix: testPrefix(), timeoutMs: 1_000 });
    const pauser = connectRedis(server.url);
    try {
      const user = await store.users.create({ username: "late", tier: "free", passwordHash: "h" });
      if (user === "exists") throw new Error("late exists");
      expect(await store.sessions.list(user.id)).toEqual([]);
      const ran: string[] = [];
      const monitor = await monitorRedis(server.url, (args, source) => {
        if (source !== "lua" && args.some((arg) => String(arg).includes(user.id)))
          ran.push(`${args[0]} ${args.filter((a) => String(a).includes(user.id)).join(" ")}`);
      });
      // Writes wait (scripts that may write included); the creation's listing, a read, passes.
      await pauser.call("CLIENT", "PAUSE", "800", "WRITE");
      const started = Date.now();
      const creation = store.sessions.create(
        { userId: user.id, deviceName: "d", ip: "198.51.100.7", userAgent: "u", passwordHash: "h" },
        { idleMs: 60_000, maxAgeMs: 600_000, maxPerUser: 5 },
      );
      await expect(creation).rejects.toThrow();
      expect(Date.now() - started).toBeLessThan(800);
      // Once the pause is over the creation runs, and then the revocation queued behind it.
      await new Promise((resolve) => setTimeout(resolve, Math.max(0, started + 800 + 300 - Date.now())));
      expect(await store.sessions.list(user.id)).toEqual([]);
      monitor.close();
      // The creation did run, late, and the revocation of the same session after it.
      const sessionKey = /\S+:s:\S+/.exec(
        ran.find((line) => line.toLowerCase().startsWith("fcall ")) ?? "",
      )?.[0];
      expect(sessionKey).toBeDefined();
      const created = ran.findIndex(
        (line) => line.toLowerCase().startsWith("fcall ") && line.includes(sessionKey as string),
      );
      const deleted = ran.indexOf(`del ${sessionKey}`);
      expect(created).toBeGreaterThanOrEqual(0);
      expect(deleted).toBeGreaterThan(created);
    } finally {
      pauser.disconnect();
      await store.close();
      await server.stop();
    }
  });
});
