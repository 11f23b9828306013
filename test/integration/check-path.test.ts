// The check path on a real Redis: one script call per check, and what happens when Redis goes away.
import { randomBytes } from "node:crypto";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Tollgate } from "../../src/app.js";
import { demoUsers, loadUsers } from "../../src/auth/users-file.js";
import { createRedisClient } from "../../src/store/redis/client.js";
import { createRedisStore, type Store } from "../../src/store/store.js";
import { demoToken, type InProcess, startInProcess } from "../support/in-process.js";
import { monitorRedis } from "../support/local.mjs";
import { type RedisServer, startRedisServer } from "../support/processes.mjs";
import { isWatchdogTraffic } from "../support/redis.js";

let server: RedisServer;
let redis: Redis;
let store: Store;
/** Every tollgate of this file, on the one store (its demo users loaded once), closed after the file. */
const instances: InProcess[] = [];
const startOn = async (env: Record<string, string>): Promise<Tollgate> => {
  const instance = await startInProcess({ store, demoUsers: false, env: { LOG_LEVEL: "silent", ...env } });
  instances.push(instance);
  return instance.tollgate;
};
const build = (failureMode: "open" | "closed"): Promise<Tollgate> => startOn({ FAILURE_MODE: failureMode });
let open: Tollgate;
let closed: Tollgate;
let token = "";

// Open mode on strong secrets, outside production and in it; one JWT secret for both, so that a
// demo token minted outside production verifies in production.
const shared = {
  JWT_SECRET: randomBytes(32).toString("base64"),
  ADMIN_TOKEN: randomBytes(32).toString("base64"),
  FAILURE_MODE: "open",
};
const buildOn = (env: Record<string, string>): Promise<Tollgate> => startOn({ ...shared, ...env });
let demo: Tollgate;
let production: Tollgate;
let demoSigned = "";

beforeAll(async () => {
  // A Redis of its own: MONITOR must see this file's commands only.
  server = await startRedisServer();
  redis = createRedisClient({ url: server.url });
  store = createRedisStore({ redis, prefix: "tg:" });
  expect(await store.connected(5_000)).toBe(true);
  await loadUsers(store.users, demoUsers());
  open = await build("open");
  closed = await build("closed");
  token = await demoToken(open.auth, "bob_pro");
  demo = await buildOn({});
  production = await buildOn({ NODE_ENV: "production" });
  demoSigned = await demoToken(demo.auth, "bob_pro");
});

afterAll(async () => {
  for (const instance of instances) await instance.close();
  redis.disconnect();
  await server.stop();
});

const check = (t: Tollgate, path: string, authorization?: string) =>
  t.checker({ method: "GET", path, authorization, ip: "192.0.2.77" });

/** Records every command Redis receives from a client (not from inside scripts) while `run` runs. */
async function commandsDuring(run: () => Promise<void>): Promise<string[]> {
  const seen: string[] = [];
  const monitor = await monitorRedis(server.url, (args, source) => {
    if (source !== "lua" && !isWatchdogTraffic(args)) seen.push(String(args[0]).toLowerCase());
  });
  await run();
  await new Promise((r) => setTimeout(r, 100));
  monitor.close();
  return seen;
}

describe("the check path on Redis", () => {
  it("costs exactly one script call per check: allowed, denied and anonymous", async () => {
    // Warm up: the first check loads the function library (or, without functions, ioredis sends
    // EVAL once per script when Redis does not know its SHA yet).
    await check(open, "/api/products", `Bearer ${token}`);
    await check(open, "/api/products");
    const commands = await commandsDuring(async () => {
      for (let i = 0; i < 40; i += 1) await check(open, "/api/products", `Bearer ${token}`);
      await Promise.all(Array.from({ length: 30 }, () => check(open, "/api/search", `Bearer ${token}`)));
      for (let i = 0; i < 30; i += 1) await check(open, "/api/orders", "Bearer not-a-jwt");
    });
    expect(commands).toHaveLength(100);
    // One FCALL of tollgate's function library per check (Redis 7).
    expect(new Set(commands)).toEqual(new Set(["fcall"]));
  });

  it("asks nothing of Redis for unlimited routes", async () => {
    const commands = await commandsDuring(async () => {
      for (let i = 0; i < 10; i += 1) await check(open, "/health");
    });
    expect(commands).toEqual([]);
  });
});

describe("when Redis is down", () => {
  it("allows valid tokens degraded in open mode, still refuses bad ones, and closed mode answers 503", async () => {
    await server.kill();
    try {
      const allowed = await check(open, "/api/products", `Bearer ${token}`);
      expect(allowed).toMatchObject({ kind: "allow", degraded: true, identity: { tier: "pro" } });
      expect(await check(open, "/api/products", "Bearer forged.token.here")).toMatchObject({ status: 401 });
      expect(await check(open, "/api/products")).toMatchObject({ status: 401 });
      expect(await check(closed, "/api/products", `Bearer ${token}`)).toEqual({ kind: "deny", status: 503 });
      const started = Date.now();
      await check(open, "/api/search", `Bearer ${token}`);
      expect(Date.now() - started).toBeLessThan(100 + 200);
    } finally {
      await server.restart();
    }
  });

  it("refuses the demo users in production even in open mode, where the store is not asked", async () => {
    await server.kill();
    try {
      // The same token passes degraded outside production: only the production rule refuses it.
      expect(await check(demo, "/api/products", `Bearer ${demoSigned}`)).toMatchObject({
        kind: "allow",
        degraded: true,
      });
      expect(await check(production, "/api/products", `Bearer ${demoSigned}`)).toMatchObject({
        kind: "deny",
        status: 401,
        reason: "inactive",
      });
    } finally {
      await server.restart();
    }
  });

  it("enforces again by itself once Redis is back", async () => {
    const deadline = Date.now() + 10_000;
    let decision = await check(open, "/api/products", `Bearer ${token}`);
    while (decision.kind === "allow" && decision.degraded && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 100));
      decision = await check(open, "/api/products", `Bearer ${token}`);
    }
    // The restarted Redis is empty: the session is gone, which enforcement reports as 401.
    expect(decision).toMatchObject({ kind: "deny", status: 401, reason: "revoked" });
  });
});
