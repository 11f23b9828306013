// What an API call's error log line says when the store stalls under it: the route it was on, never
// the path, which holds a whole session id or a provider subject (a person's address). Real Redis,
// paused with CLIENT PAUSE, so that each call gets its 503 and its store_error line.
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createRedisClient } from "../../src/store/redis/client.js";
import { createRedisStore, type Store } from "../../src/store/store.js";
import { type InProcess, startInProcess } from "../support/in-process.js";
import { type RedisServer, startRedisServer } from "../support/processes.mjs";
import { connectRedis } from "../support/redis.js";

const SUBJECT = "auth0|dora.lane@example.com";

let server: RedisServer;
let pauser: Redis;
let store: Store;
let tollgate: InProcess;

beforeAll(async () => {
  // A Redis of its own: the pause would stall every other test file on the shared one.
  server = await startRedisServer();
  // The store's calls as tollgate makes them with REDIS_TIMEOUT_MS=100: an API call's wait ends at 1 s.
  store = createRedisStore({ redis: createRedisClient({ url: server.url }), prefix: "tg:", timeoutMs: 100 });
  expect(await store.connected(5_000)).toBe(true);
  tollgate = await startInProcess({ store, env: { LOG_LEVEL: "info" } });
  pauser = connectRedis(server.url);
});

afterAll(async () => {
  await tollgate?.close();
  await store?.close();
  pauser?.disconnect();
  await server?.stop();
});

describe("a store error's log line", () => {
  it("names the route, never the session id or subject in the path", async () => {
    const user = await tollgate.newUser();
    const session = await tollgate.loginOk(user.username, user.password);
    const other = await tollgate.loginOk(user.username, user.password);
    const before = tollgate.logWrites().length;

    // Every command waits out the pause: each call below waits for its store, then answers 503.
    await pauser.client("PAUSE", 2_500, "ALL");
    const answers = await Promise.all([
      tollgate.admin("DELETE", `/admin/users/${user.id}/sessions/${session.session_id}`, {
        token: tollgate.adminToken,
      }),
      tollgate.admin("PUT", `/admin/subjects/${encodeURIComponent(SUBJECT)}/blocked`, {
        token: tollgate.adminToken,
      }),
      tollgate.api("POST", `/auth/sessions/${session.session_id}/revoke`, { token: other.access_token }),
    ]);
    expect(answers.map((a) => a.status)).toEqual([503, 503, 503]);

    const lines = tollgate.logWrites().slice(before);
    const errors = lines.map((l) => JSON.parse(l)).filter((l) => l.event === "store_error");
    expect(errors.map((l) => l.route).sort()).toEqual([
      "/admin/subjects/:sub/blocked",
      "/admin/users/:id/sessions/:sid",
      "/auth/sessions/:sid/revoke",
    ]);
    const text = lines.join("");
    expect(text).not.toContain(session.session_id);
    expect(text).not.toContain("dora.lane");
    expect(text).not.toContain(other.access_token);
  });
});
