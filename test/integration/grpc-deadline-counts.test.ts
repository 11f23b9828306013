// ext_authz Check and ShouldRateLimit over real gRPC (node:http2's client) while Redis stalls: a call
// whose grpc-timeout passes first is answered DEADLINE_EXCEEDED at that deadline, not at tollgate's
// own (REDIS_TIMEOUT_MS, RLS_TIMEOUT_MS), and counts nothing once Redis runs it late; so does one its
// client resets (as Envoy does at its timeout). Where tollgate's own deadline comes first, or the call
// states none, it behaves as before.
import * as http2 from "node:http2";
import { fileURLToPath } from "node:url";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Decision } from "../../src/check/types.js";
import { messages } from "../../src/frontends/envoy-grpc/protos.js";
import { createRedisClient } from "../../src/store/redis/client.js";
import { createRedisStore, type Store } from "../../src/store/store.js";
import { checkRequest, rateLimitRequest } from "../support/grpc-client.js";
import { h2Call } from "../support/h2-call.js";
import { demoToken, type InProcess, sleep, startInProcess } from "../support/in-process.js";
import { type RedisServer, startRedisServer } from "../support/processes.mjs";
import { connectRedis } from "../support/redis.js";

const CHECK = "/envoy.service.auth.v3.Authorization/Check";
const RLS = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
/** google.rpc.Code */
const Code = { OK: "0", DEADLINE_EXCEEDED: "4" };
const RLS_CONFIG = fileURLToPath(new URL("../fixtures/rls/late/", import.meta.url));
/** Every descriptor's limit in that configuration: 100 a day. */
const LIMIT = 100;
/** How long Redis stalls: far past the calls' 100 ms deadlines, short of tollgate's own. */
const STALL_MS = 1_500;

let server: RedisServer;
let redis: Redis;
let pauser: Redis;
let store: Store;
let instance: InProcess;
let session: http2.ClientHttp2Session;
let token: string;

beforeAll(async () => {
  // A Redis of its own: the pauses would stall every other test file on the shared one.
  server = await startRedisServer();
  redis = createRedisClient({ url: server.url });
  store = createRedisStore({ redis, prefix: "tg:" });
  expect(await store.connected(5_000)).toBe(true);
  pauser = connectRedis(server.url);
  // tollgate's own deadlines longer than the stall: only the caller's can end a call before Redis resumes.
  const env = { LOG_LEVEL: "silent", REDIS_TIMEOUT_MS: "3000", RLS_CONFIG, RLS_TIMEOUT_MS: "3000" };
  instance = await startInProcess({ store, demoUsers: true, env });
  session = http2.connect(instance.grpcUrl);
  token = await demoToken(instance.tollgate.auth, "alice");
});

afterAll(async () => {
  session?.destroy();
  await instance?.close();
  pauser?.disconnect();
  await store?.close();
  await server?.stop();
});

/** A gRPC call on the tollgate's session, or on `options.session`. */
const grpcCall = (
  path: string,
  message: Uint8Array,
  options: {
    headers?: http2.OutgoingHttpHeaders;
    resetAfterMs?: number;
    session?: http2.ClientHttp2Session;
  } = {},
) => h2Call(options.session ?? session, path, message, options);

/** Pauses Redis's writes (every count) for STALL_MS; resolves once the pause has ended and its backlog ran. */
async function duringStall(run: () => Promise<void>): Promise<void> {
  const until = Date.now() + STALL_MS;
  expect(await pauser.call("CLIENT", "PAUSE", String(STALL_MS), "WRITE")).toBe("OK");
  await run();
  await sleep(Math.max(0, until - Date.now()) + 300);
}

const usedOf = (d: Decision): number | undefined => (d.kind === "allow" ? d.limit?.used : undefined);

describe("an ext_authz Check while Redis stalls", () => {
  const ip = "192.0.2.41";
  /** orders: 10 an hour for a free user, so that every count shows. */
  const path = "/api/orders";
  const message = () =>
    messages.CheckRequest.encode(
      checkRequest({ method: "POST", path, headers: { authorization: `Bearer ${token}` }, source: ip }),
    ).finish();
  const used = async () =>
    usedOf(
      await instance.tollgate.checker(
        { method: "POST", path, authorization: `Bearer ${token}`, ip },
        {
          dryRun: true,
        },
      ),
    );

  it("with a grpc-timeout shorter than REDIS_TIMEOUT_MS is answered DEADLINE_EXCEEDED then, and counts nothing", async () => {
    const before = (await used()) ?? 0;
    await duringStall(async () => {
      const answers = await Promise.all(
        [1, 2, 3].map(() => grpcCall(CHECK, message(), { headers: { "grpc-timeout": "100m" } })),
      );
      expect(answers.map((a) => a.status)).toEqual([
        Code.DEADLINE_EXCEEDED,
        Code.DEADLINE_EXCEEDED,
        Code.DEADLINE_EXCEEDED,
      ]);
      // Well before Redis resumes (and tollgate's own 3 s): the caller's deadline ended them.
      for (const answer of answers) expect(answer.ms).toBeLessThan(STALL_MS - 300);
    });
    // Redis ran the three late and each was taken back.
    expect(await used()).toBe(before);
  });

  it("reset by its client before the answer (Envoy at its timeout) counts nothing either", async () => {
    const before = (await used()) ?? 0;
    await duringStall(async () => {
      const answer = await grpcCall(CHECK, message(), { resetAfterMs: 100 });
      expect(answer.status).toBeUndefined();
    });
    expect(await used()).toBe(before);
  });

  it("with a grpc-timeout longer than REDIS_TIMEOUT_MS degrades at REDIS_TIMEOUT_MS as before, and counts", async () => {
    const quick = await startInProcess({
      store,
      demoUsers: false,
      env: { LOG_LEVEL: "silent", REDIS_TIMEOUT_MS: "100", FAILURE_MODE: "open" },
    });
    const quickSession = http2.connect(quick.grpcUrl);
    try {
      const before = (await used()) ?? 0;
      await duringStall(async () => {
        const answer = await grpcCall(CHECK, message(), {
          headers: { "grpc-timeout": "5S" },
          session: quickSession,
        });
        expect(answer.status).toBe(Code.OK);
        expect(answer.ms).toBeLessThan(STALL_MS - 300);
      });
      // Allowed degraded: Envoy got the answer and let the request pass, so it counts.
      expect(await used()).toBe(before + 1);
    } finally {
      quickSession.destroy();
      await quick.close();
    }
  });

  it("without grpc-timeout waits for Redis as before, within REDIS_TIMEOUT_MS, and counts", async () => {
    const before = (await used()) ?? 0;
    await duringStall(async () => {
      const answer = await grpcCall(CHECK, message());
      expect(answer.status).toBe(Code.OK);
      expect(answer.ms).toBeGreaterThan(STALL_MS - 500);
    });
    expect(await used()).toBe(before + 1);
  });
});

describe("a ShouldRateLimit call while Redis stalls", () => {
  const rls = (hits: number) =>
    messages.RateLimitRequest.encode(
      rateLimitRequest(
        "late",
        ["fw", "slog", "scount", "gcra"].map((key) => ({ entries: [[key, value]] as const })),
        hits,
      ),
    ).finish();
  let value: string;
  /** What each descriptor has used, looked at with a hit of 0. */
  const used = async (): Promise<number[]> => {
    const decide = instance.tollgate.rls?.decide;
    if (decide === undefined) throw new Error("no RLS_CONFIG");
    const answer = await decide({
      domain: "late",
      descriptors: ["fw", "slog", "scount", "gcra"].map((key) => ({
        entries: [{ key, value }],
        limit: undefined,
      })),
      addends: [0, 0, 0, 0],
      requestId: undefined,
    });
    return answer.statuses.map((s) => LIMIT - s.limit_remaining);
  };

  beforeAll(() => {
    value = Math.random().toString(36).slice(2);
  });

  it("with a grpc-timeout shorter than RLS_TIMEOUT_MS is answered DEADLINE_EXCEEDED then, and counts nothing in any algorithm", async () => {
    expect((await grpcCall(RLS, rls(1))).status).toBe(Code.OK);
    expect(await used()).toEqual([1, 1, 1, 1]);
    await duringStall(async () => {
      const answer = await grpcCall(RLS, rls(3), { headers: { "grpc-timeout": "100m" } });
      expect(answer.status).toBe(Code.DEADLINE_EXCEEDED);
      expect(answer.ms).toBeLessThan(STALL_MS - 300);
    });
    expect(await used()).toEqual([1, 1, 1, 1]);
  });

  it("reset by its client before the answer counts nothing", async () => {
    const before = await used();
    await duringStall(async () => {
      expect((await grpcCall(RLS, rls(2), { resetAfterMs: 100 })).status).toBeUndefined();
    });
    expect(await used()).toEqual(before);
  });

  it("without grpc-timeout waits for Redis as before and counts", async () => {
    const before = await used();
    await duringStall(async () => {
      const answer = await grpcCall(RLS, rls(2));
      expect(answer.status).toBe(Code.OK);
    });
    expect(await used()).toEqual(before.map((n) => n + 2));
  });
});
