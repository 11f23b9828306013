// Provider tokens and API keys on a real redis-server: the shared contract, plus what only Redis
// shows: only a key's hash is stored, and every key a check touches shares its subject's hash tag.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { hashApiKey, newApiKey } from "../../src/auth/api-keys.js";
import { DEFAULT_POLICY_YAML, parsePolicy } from "../../src/policy/policy.js";
import { externalSubject } from "../../src/ratelimit/types.js";
import type { RedisClient } from "../../src/store/redis/client.js";
import { createKeys } from "../../src/store/redis/keys.js";
import { createRedisApiKeyStore } from "../../src/store/redis/profile-store.js";
import { createRedisStore } from "../../src/store/store.js";
import { describeExternalIdentityContract } from "../contract/external-identity-contract.js";
import { type InProcessOnRedis, startInProcess } from "../support/in-process.js";
import {
  type JwksServer,
  makeKey,
  signToken,
  startJwksServer,
  type TestKey,
} from "../support/jwks-server.js";
import { monitorRedis } from "../support/local.mjs";
import { connectRedis, redisUrl, testPrefix } from "../support/redis.js";
import { ADMIN_TOKEN } from "../support/secrets.mjs";

/** The client with every `command` failing, as over a connection lost just before it. */
const failing = (redis: RedisClient, command: string): RedisClient =>
  new Proxy(redis, {
    get(target, property) {
      const value: unknown = Reflect.get(target, property, target);
      if (property === command) return async () => Promise.reject(new Error(`${command}: connection lost`));
      return typeof value === "function" ? value.bind(target) : value;
    },
  });

describeExternalIdentityContract("redis", () =>
  createRedisStore({ redis: connectRedis(), prefix: testPrefix() }),
);

describe("external identities on redis", () => {
  let idp: JwksServer;
  let key: TestKey;
  let t: InProcessOnRedis;
  beforeAll(async () => {
    key = makeKey("r1");
    idp = await startJwksServer([key]);
    t = await startInProcess({
      env: {
        LOG_LEVEL: "silent",
        JWKS_URL: idp.jwksUrl,
        JWT_ISSUER: idp.issuer,
        JWT_AUDIENCE: "api://redis",
      },
    });
    await t.tollgate.providerKeys?.ready();
  });
  afterAll(async () => {
    await t?.close();
    await idp?.close();
  });

  it("stores an API key only as its SHA-256, in the key's own hash tag", async () => {
    const made = await t.admin<{ id: string; key: string }>("POST", "/admin/api-keys", {
      token: t.adminToken,
      json: { name: "stored", tier: "free" },
    });
    const stored = await t.redis.hgetall(`${t.prefix}{k:${made.body.id}}:key`);
    expect(stored.h).toBe(hashApiKey(made.body.key));
    expect(JSON.stringify(stored)).not.toContain(made.body.key.slice(20));
    expect(await t.redis.zrange(`${t.prefix}{apikeys}:ids`, 0, -1)).toContain(made.body.id);
    expect(await t.redis.pttl(`${t.prefix}{k:${made.body.id}}:key`)).toBe(-1);
  });

  it("pages through every key when ids in the listing have no key left, and drops those ids", async () => {
    const index = `${t.prefix}{apikeys}:ids`;
    for (let i = 0; i < 4; i += 1) {
      const made = await t.admin("POST", "/admin/api-keys", {
        token: t.adminToken,
        json: { name: `paged ${i}`, tier: "free" },
      });
      expect(made.status).toBe(201);
    }
    // What a revocation that failed after deleting the key leaves: ids first, last, and in between.
    const listed = await t.redis.zrange(index, 0, -1);
    const between = (listed[1] as string).replace(/.$/, (c) => (c === "0" ? "1" : "0"));
    const dangling = ["0000000000000000", between, "ffffffffffffffff"].filter((id) => !listed.includes(id));
    await t.redis.zadd(index, ...dangling.flatMap((id) => [0, id]));
    const seen: string[] = [];
    let after: string | null = null;
    do {
      const query: string = after === null ? "?limit=2" : `?limit=2&after=${after}`;
      const page = await t.admin<{ api_keys: { id: string }[]; next: string | null }>(
        "GET",
        `/admin/api-keys${query}`,
        { token: t.adminToken },
      );
      expect(page.status).toBe(200);
      seen.push(...page.body.api_keys.map((k) => k.id));
      after = page.body.next;
    } while (after !== null);
    expect(seen).toEqual(listed);
    expect(await t.redis.zrange(index, 0, -1)).toEqual(listed);
  });

  it("revokes a deleted user's keys even behind a whole page of ids without keys", async () => {
    const index = `${t.prefix}{apikeys}:ids`;
    const dangling = Array.from({ length: 1001 }, (_, i) => `00000000${i.toString(16).padStart(8, "0")}`);
    await t.redis.zadd(index, ...dangling.flatMap((id) => [0, id]));
    const user = await t.newUser("free");
    const made = await t.admin<{ id: string; key: string }>("POST", "/admin/api-keys", {
      token: t.adminToken,
      json: { name: "behind the gaps", tier: "free", user_id: user.id },
    });
    const deleted = await t.admin("DELETE", `/admin/users/${user.id}`, { token: t.adminToken });
    expect(deleted.body).toMatchObject({ api_keys_revoked: 1 });
    const res = await fetch(`${t.checkUrl}/ext_authz/api/products`, {
      headers: { "x-api-key": made.body.key },
    });
    expect(res.status).toBe(401);
    expect(await t.redis.zscore(index, dangling[0] as string)).toBeNull();
  });

  it("leaves no key outside the listing and no id without its key, whichever step of a creation fails", async () => {
    const index = `${t.prefix}{apikeys}:ids`;
    for (const step of ["hset", "zadd"]) {
      const broken = createRedisApiKeyStore({ redis: failing(t.redis, step), keys: createKeys(t.prefix) });
      const { id, hash } = newApiKey();
      await expect(
        broken.create({ id, hash, name: step, tier: "free", userId: undefined }),
      ).rejects.toThrow();
      expect(await t.redis.exists(`${t.prefix}{k:${id}}:key`), step).toBe(0);
      expect(await t.redis.zscore(index, id), step).toBeNull();
    }
  });

  it("refuses a revoked key at once even when its revocation failed after deleting it", async () => {
    // The key's hash goes, then dropping its id from the listing fails: the DELETE answers 503.
    const store = createRedisStore({ redis: failing(connectRedis(), "zrem"), prefix: testPrefix() });
    const broken = await startInProcess({ store, env: { LOG_LEVEL: "silent" } });
    try {
      const admin = <T>(method: string, path: string, json?: unknown) =>
        broken.admin<T>(method, path, { token: ADMIN_TOKEN, ...(json === undefined ? {} : { json }) });
      const made = await admin<{ id: string; key: string }>("POST", "/admin/api-keys", {
        name: "cached then revoked",
        tier: "free",
      });
      expect((await admin("PUT", `/admin/api-keys/${made.body.id}/limits`, { search: "1/1h" })).status).toBe(
        200,
      );
      const check = () =>
        broken.tollgate.checker({
          method: "GET",
          path: "/api/search",
          authorization: undefined,
          apiKey: made.body.key,
          ip: "198.51.100.61",
        });
      expect(await check()).toMatchObject({ kind: "allow" });
      // Refused, then refused from the denial cache.
      expect(await check()).toMatchObject({ kind: "deny", status: 429 });
      expect(await check()).toMatchObject({ kind: "deny", status: 429 });
      expect((await admin("DELETE", `/admin/api-keys/${made.body.id}`)).status).toBe(503);
      expect(await check()).toMatchObject({ kind: "deny", status: 401, reason: "revoked" });
    } finally {
      await broken.close();
      await store.close();
    }
  });

  it("makes one script call per check, every key of it under one hash tag, the key's and the subject's", async () => {
    const made = await t.admin<{ id: string; key: string }>("POST", "/admin/api-keys", {
      token: t.adminToken,
      json: { name: "one call", tier: "free" },
    });
    const now = Math.floor(Date.now() / 1000);
    const sub = "okta|00u-one-call";
    const token = signToken(key, { iss: idp.issuer, aud: "api://redis", sub, exp: now + 60 });
    const calls: string[][] = [];
    const monitor = await monitorRedis(redisUrl(), (args, source) => {
      if (source !== "lua" && args.some((a) => String(a).startsWith(t.prefix))) calls.push(args.map(String));
    });
    const ways: Record<string, string>[] = [
      { "x-api-key": made.body.key },
      { authorization: `Bearer ${token}` },
    ];
    for (const headers of ways) {
      const res = await fetch(`${t.checkUrl}/ext_authz/api/products`, { headers });
      expect(res.status).toBe(200);
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
    monitor.close();
    const fcalls = calls.filter((c) => c[0]?.toLowerCase() === "fcall");
    expect(fcalls.length).toBe(2);
    const tags = fcalls.map(
      (c) => new Set(c.filter((a) => a.startsWith(t.prefix)).map((a) => /\{[^}]+\}/.exec(a)?.[0])),
    );
    expect([...(tags[0] ?? [])]).toEqual([`{k:${made.body.id}}`]);
    expect([...(tags[1] ?? [])]).toEqual([`{${externalSubject(sub)}}`]);
    // The subject's windows expire; no profile exists until an admin sets one.
    const keys = await t.redis.keys(`${t.prefix}{${externalSubject(sub)}}*`);
    expect(keys.length).toBeGreaterThan(0);
    for (const k of keys) expect(await t.redis.pttl(k), k).toBeGreaterThan(0);
  });

  it("writes a key's last use inside the check's own call, once for many checks", async () => {
    const made = await t.admin<{ id: string; key: string }>("POST", "/admin/api-keys", {
      token: t.adminToken,
      json: { name: "coalesced", tier: "pro" },
    });
    const hash = `${t.prefix}{k:${made.body.id}}:key`;
    const sent: string[][] = [];
    const inScripts: string[][] = [];
    const monitor = await monitorRedis(redisUrl(), (args, source) => {
      if (!args.some((a) => String(a) === hash)) return;
      (source === "lua" ? inScripts : sent).push(args.map(String));
    });
    for (let i = 0; i < 20; i += 1) {
      const res = await fetch(`${t.checkUrl}/ext_authz/api/products`, {
        headers: { "x-api-key": made.body.key },
      });
      expect(res.status).toBe(200);
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
    monitor.close();
    expect(sent.map((c) => c[0]?.toLowerCase())).toEqual(Array(20).fill("fcall"));
    expect(inScripts.filter((c) => c[0]?.toLowerCase() === "hset" && c[2] === "used")).toHaveLength(1);
    expect(Number(await t.redis.hget(hash, "used"))).toBeGreaterThan(Date.now() - 10_000);
  });

  it("lets a provider subject's counter record expire, as an address's does", async () => {
    const policy = parsePolicy(
      DEFAULT_POLICY_YAML.replace(
        "free:       { general: 100/1h,",
        "free:       { algorithm: sliding-counter, general: 100/1h,",
      ),
      "counter policy",
    );
    const counted = await startInProcess({
      policy,
      env: {
        LOG_LEVEL: "silent",
        JWKS_URL: idp.jwksUrl,
        JWT_ISSUER: idp.issuer,
        JWT_AUDIENCE: "api://redis",
      },
    });
    try {
      await counted.tollgate.providerKeys?.ready();
      const sub = "counter-subject";
      const now = Math.floor(Date.now() / 1000);
      const token = signToken(key, { iss: idp.issuer, aud: "api://redis", sub, exp: now + 60 });
      for (let i = 0; i < 3; i += 1) {
        const res = await fetch(`${counted.checkUrl}/ext_authz/api/products`, {
          headers: { authorization: `Bearer ${token}` },
        });
        expect(res.status).toBe(200);
        expect(res.headers.get("x-ratelimit-used")).toBe(String(i + 1));
      }
      const record = `${counted.prefix}{${externalSubject(sub)}}:r`;
      expect(await counted.redis.hexists(record, "r:general")).toBe(1);
      const ttl = await counted.redis.pttl(record);
      expect(ttl).toBeGreaterThan(3_600_000);
      expect(ttl).toBeLessThan(3 * 3_600_000);
    } finally {
      await counted.close();
    }
  });
});
