// A check (or a login) that stopped waiting on a stalled Redis: what the call counts when Redis runs
// it late. A request refused without the store's answer (503) is never recorded; one allowed
// degraded passed, and counts once Redis gets to it.
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Tollgate } from "../../src/app.js";
import type { Decision } from "../../src/check/types.js";
import { logRule, usernameSubject } from "../../src/ratelimit/types.js";
import { createRedisClient } from "../../src/store/redis/client.js";
import { createRedisStore, type Store } from "../../src/store/store.js";
import { demoToken, type InProcess, sleep, startInProcess } from "../support/in-process.js";
import { type RedisServer, startRedisServer } from "../support/processes.mjs";
import { connectRedis } from "../support/redis.js";

let server: RedisServer;
let redis: Redis;
let pauser: Redis;
let store: Store;
const instances: InProcess[] = [];
let open: Tollgate;
let closed: Tollgate;

beforeAll(async () => {
  // A Redis of its own: the pauses would stall every other test file on the shared one. The client
  // is made as tollgate makes its own (no offline queue).
  server = await startRedisServer();
  redis = createRedisClient({ url: server.url });
  store = createRedisStore({ redis, prefix: "tg:" });
  expect(await store.connected(5_000)).toBe(true);
  pauser = connectRedis(server.url);
  for (const mode of ["open", "closed"]) {
    const env = { LOG_LEVEL: "silent", FAILURE_MODE: mode, REDIS_TIMEOUT_MS: "100" };
    // The demo users are loaded once, by the first.
    instances.push(await startInProcess({ store, demoUsers: mode === "open", env }));
  }
  [open, closed] = instances.map((i) => i.tollgate) as [Tollgate, Tollgate];
});

afterAll(async () => {
  for (const instance of instances) await instance.close();
  pauser.disconnect();
  await store.close();
  await server.stop();
});

const usedOf = (d: Decision): number | undefined => (d.kind === "allow" ? d.limit?.used : undefined);
const summary = (d: Decision): string =>
  d.kind === "allow" ? `allow${d.degraded ? " degraded" : ""}` : `deny ${d.status}`;

/** Pauses Redis's writes (every limit script call) for `ms`; resolves once the pause has ended and its backlog ran. */
async function duringPause(ms: number, run: () => Promise<void>): Promise<void> {
  const until = Date.now() + ms;
  expect(await pauser.call("CLIENT", "PAUSE", String(ms), "WRITE")).toBe("OK");
  await run();
  await sleep(Math.max(0, until - Date.now()) + 300);
}

/**
 * One check before a stall, `count` at once during it (each answered `during`), one after: what the
 * window holds after it (the first and the last check count 1 each).
 */
async function acrossStall(
  check: () => Decision | Promise<Decision>,
  count: number,
  during: string,
): Promise<number | undefined> {
  const before = await check();
  expect([summary(before), usedOf(before)]).toEqual(["allow", 1]);
  await duringPause(600, async () => {
    const answers = await Promise.all(Array.from({ length: count }, check));
    expect(answers.map(summary)).toEqual(answers.map(() => during));
  });
  const after = await check();
  expect(summary(after)).toBe("allow");
  return usedOf(after);
}

describe("a check answered without the store while Redis stalls", () => {
  it("in closed mode, answered 503, is not counted once Redis runs it late", async () => {
    const token = await demoToken(closed.auth, "alice");
    const check = () =>
      closed.checker({
        method: "GET",
        path: "/api/orders",
        authorization: `Bearer ${token}`,
        ip: "192.0.2.31",
      });
    // orders: 10 an hour for a free user, so that every count shows.
    expect(await acrossStall(check, 5, "deny 503")).toBe(2);
  });

  it("in open mode, answered 503 on a limited route without a token (login), is not counted either", async () => {
    const check = () =>
      open.checker({ method: "POST", path: "/auth/login", authorization: undefined, ip: "192.0.2.32" });
    expect(await acrossStall(check, 4, "deny 503")).toBe(2);
  });

  it("in open mode, allowed degraded, counts once Redis runs it: the request did pass", async () => {
    const token = await demoToken(open.auth, "bob_pro");
    const check = () =>
      open.checker({
        method: "GET",
        path: "/api/orders",
        authorization: `Bearer ${token}`,
        ip: "192.0.2.33",
      });
    expect(await acrossStall(check, 3, "allow degraded")).toBe(5);
  });
});

describe("a login answered 503 while Redis stalls", () => {
  it("leaves no failed attempt against the username once Redis runs its count late", async () => {
    const lockout = { category: "login_failed", rule: logRule(10, 15 * 60_000) };
    const failures = async () => (await store.limiter.peek(usernameSubject("ent_carol"), lockout))[0]?.used;
    expect(await failures()).toBe(0);
    const api = instances[0] as InProcess;
    // Longer than the APIs' deadline (1 s at REDIS_TIMEOUT_MS=100).
    await duringPause(1_500, async () => {
      const reply = await api.login("ent_carol", "wrong password");
      expect([reply.status, (reply.body as { error?: string }).error]).toEqual([503, "unavailable"]);
    });
    expect(await failures()).toBe(0);
    // A real failure still counts.
    expect((await api.login("ent_carol", "wrong password")).status).toBe(401);
    expect(await failures()).toBe(1);
  });
});

describe("a check refused while Redis stalls longer than the client's own command timer", () => {
  it("is still not counted: the limiter's calls wait for Redis's late answer, whatever that timer says", async () => {
    // A client whose backstop timer (commandTimeout) fires long before Redis resumes.
    const client = createRedisClient({ url: server.url, commandTimeoutMs: 200 });
    const shortStore = createRedisStore({ redis: client, prefix: "tg:" });
    expect(await shortStore.connected(5_000)).toBe(true);
    const instance = await startInProcess({
      store: shortStore,
      demoUsers: false,
      env: { LOG_LEVEL: "silent", FAILURE_MODE: "closed", REDIS_TIMEOUT_MS: "100" },
    });
    try {
      const token = await demoToken(instance.tollgate.auth, "alice");
      const check = () =>
        instance.tollgate.checker({
          method: "GET",
          path: "/api/orders",
          authorization: `Bearer ${token}`,
          ip: "192.0.2.34",
        });
      const before = await check();
      expect(summary(before)).toBe("allow");
      await duringPause(800, async () => {
        const refused = await Promise.all(Array.from({ length: 3 }, check));
        expect(refused.map(summary)).toEqual(refused.map(() => "deny 503"));
      });
      const after = await check();
      expect([summary(after), usedOf(after)]).toEqual(["allow", (usedOf(before) ?? 0) + 1]);
    } finally {
      await instance.close();
      await shortStore.close();
    }
  });
});
