import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import * as http2 from "node:http2";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTollgate } from "../../src/app.js";
import { loadConfig } from "../../src/config/env.js";
import { loadPolicy } from "../../src/policy/policy.js";
import { createLogger } from "../../src/process/logger.js";
import { createReadiness } from "../../src/process/readiness.js";
import { createRedisStore } from "../../src/store/store.js";
import { checkRequest, type GrpcClients, grpcClients, headerRecord } from "../support/grpc-client.js";
import { login } from "../support/http-client.mjs";
import { type InProcessOnRedis, startInProcess } from "../support/in-process.js";
import { serveListeners } from "../support/listeners.js";
import {
  type RedisServer,
  startRedisServer,
  startTollgate,
  type TollgateProcess,
} from "../support/processes.mjs";
import { connectRedis, redisUrl, testPrefix } from "../support/redis.js";
import { ADMIN_TOKEN, JWT_SECRET } from "../support/secrets.mjs";
import { selfSignedCert } from "../support/self-signed.js";

const CHECK = "/envoy.service.auth.v3.Authorization/Check";
const SERVING = 1;
const NOT_SERVING = 2;
/** google.rpc.Code */
const Code = {
  OK: 0,
  INVALID_ARGUMENT: 3,
  NOT_FOUND: 5,
  RESOURCE_EXHAUSTED: 8,
  UNIMPLEMENTED: 12,
  UNAVAILABLE: 14,
  UNAUTHENTICATED: 16,
};

let addressCounter = 0;
/** A distinct client address per request or test, so that per-address limits stay out of the way. */
const nextAddress = (): string => {
  addressCounter += 1;
  return `10.77.${(addressCounter >> 8) & 255}.${addressCounter & 255}`;
};

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** One gRPC call in raw HTTP/2 frames: the answer's headers, body and trailers, as sent. */
async function rawCall(
  session: http2.ClientHttp2Session,
  path: string,
  body: Buffer,
  headers: Record<string, string> = {},
): Promise<{ headers: http2.IncomingHttpHeaders; trailers: http2.IncomingHttpHeaders; body: Buffer }> {
  const stream = session.request({
    ":method": "POST",
    ":path": path,
    "content-type": "application/grpc",
    te: "trailers",
    ...headers,
  });
  const chunks: Buffer[] = [];
  let trailers: http2.IncomingHttpHeaders = {};
  let responseHeaders: http2.IncomingHttpHeaders = {};
  stream.on("response", (h) => {
    responseHeaders = h;
  });
  stream.on("trailers", (t) => {
    trailers = t;
  });
  stream.on("data", (chunk: Buffer) => chunks.push(chunk));
  stream.end(body);
  await new Promise<void>((resolve, reject) => {
    stream.on("end", resolve);
    stream.on("error", reject);
  });
  return { headers: responseHeaders, trailers, body: Buffer.concat(chunks) };
}

const framed = (message: Buffer, flag = 0): Buffer => {
  const prefix = Buffer.alloc(5);
  prefix[0] = flag;
  prefix.writeUInt32BE(message.length, 1);
  return Buffer.concat([prefix, message]);
};

/** The grpc-status of a raw answer: in the trailers, or in the headers of a Trailers-Only answer. */
const statusOf = (answer: { headers: http2.IncomingHttpHeaders; trailers: http2.IncomingHttpHeaders }) =>
  Number(answer.trailers["grpc-status"] ?? answer.headers["grpc-status"]);

describe("the gRPC Check on one tollgate", () => {
  let tollgate: InProcessOnRedis;
  let grpc: GrpcClients;

  beforeAll(async () => {
    tollgate = await startInProcess();
    grpc = grpcClients(tollgate.grpcUrl);
  });
  afterAll(async () => {
    grpc.close();
    await tollgate.close();
  });

  it("allows a signed-in user's request: identity upstream (overwriting), rate-limit headers for the client, metadata for the logs", async () => {
    const { access_token: token } = await tollgate.loginOk("alice", "secret");
    const source = nextAddress();
    const answer = await grpc.check({
      path: "/api/products?page=2",
      headers: { authorization: `Bearer ${token}`, "x-user-id": "forged", "x-user-tier": "enterprise" },
      source,
    });
    expect(answer.status?.code ?? 0).toBe(Code.OK);
    expect(answer.denied_response).toBeUndefined();
    const ok = answer.ok_response;
    const upstream = headerRecord(ok?.headers);
    const me = await tollgate.api<{ user_id: string }>("GET", "/me", { token });
    expect(upstream["x-user-id"]).toBe(me.body.user_id);
    expect(upstream["x-user-tier"]).toBe("free");
    expect(upstream["x-session-id"]).toMatch(/\S+/);
    // Every upstream header states append=false: Envoy reads only that field there, and false
    // overwrites the client's own x-user-id / x-user-tier.
    for (const option of ok?.headers ?? []) {
      expect(option.append, option.header.key).toBeDefined();
      expect(option.append?.value ?? false, option.header.key).toBe(false);
    }
    expect(ok?.headers_to_remove ?? []).toEqual([]);
    const client = headerRecord(ok?.response_headers_to_add);
    expect(client["x-ratelimit-limit"]).toBe("100");
    expect(client["x-ratelimit-resource"]).toBe("general");
    expect(client["ratelimit-policy"]).toMatch(/q=100;w=3600/);
    expect(client.ratelimit).toMatch(/;r=\d+;t=\d+$/);
    // The same headers as the HTTP check gives the client (only the counts moved on).
    const http = await fetch(`${tollgate.checkUrl}/ext_authz/api/products?page=2`, {
      headers: { authorization: `Bearer ${token}`, "x-tollgate-client-ip": source },
    });
    expect(http.status).toBe(200);
    const httpClientHeaders = [...http.headers.keys()].filter((n) => /^(x-ratelimit-|ratelimit)/.test(n));
    expect(Object.keys(client).sort()).toEqual(httpClientHeaders.sort());
    expect(Number(http.headers.get("x-ratelimit-remaining"))).toBe(
      Number(client["x-ratelimit-remaining"]) - 1,
    );
    const fields = answer.dynamic_metadata?.fields ?? {};
    expect(Object.fromEntries(Object.entries(fields).map(([k, v]) => [k, v.stringValue]))).toEqual({
      user_id: me.body.user_id,
      tier: "free",
      category: "general",
      decision: "allow",
      reason: "ok",
    });
  });

  it("removes the identity headers it did not set from an anonymous request (a forged x-user-id never reaches the upstream)", async () => {
    const answer = await grpc.check({
      method: "POST",
      path: "/auth/login",
      headers: { "x-user-id": "admin", "x-session-id": "forged", "x-user-tier": "enterprise" },
      source: nextAddress(),
    });
    expect(answer.status?.code ?? 0).toBe(Code.OK);
    expect(answer.ok_response?.headers ?? []).toEqual([]);
    expect([...(answer.ok_response?.headers_to_remove ?? [])].sort()).toEqual([
      "x-session-id",
      "x-user-id",
      "x-user-tier",
    ]);
    expect(headerRecord(answer.ok_response?.response_headers_to_add)["x-ratelimit-resource"]).toBe("login");
  });

  it("denies without a token: UNAUTHENTICATED and the HTTP check's 401 (WWW-Authenticate, JSON body)", async () => {
    const answer = await grpc.check({ path: "/api/products", source: nextAddress() });
    expect(answer.status?.code).toBe(Code.UNAUTHENTICATED);
    expect(answer.ok_response).toBeUndefined();
    const denied = answer.denied_response;
    expect(denied?.status?.code).toBe(401);
    const headers = headerRecord(denied?.headers);
    expect(headers["www-authenticate"]).toBe('Bearer realm="tollgate"');
    expect(headers["content-type"]).toBe("application/json");
    expect(JSON.parse(denied?.body ?? "")).toMatchObject({ error: "unauthorized" });
    expect(answer.dynamic_metadata?.fields?.reason?.stringValue).toBe("unauthenticated");
  });

  it("denies a bad token with the reason in WWW-Authenticate, never the token", async () => {
    const answer = await grpc.check({
      path: "/api/products",
      headers: { authorization: "Bearer not.a.token" },
      source: nextAddress(),
    });
    expect(answer.status?.code).toBe(Code.UNAUTHENTICATED);
    expect(headerRecord(answer.denied_response?.headers)["www-authenticate"]).toContain(
      'error="invalid_token"',
    );
    expect(JSON.stringify(answer)).not.toContain("not.a.token");
  });

  it("denies over the limit: RESOURCE_EXHAUSTED and a 429 with Retry-After, X-RateLimit-* and the JSON body", async () => {
    const source = nextAddress();
    const request = { method: "POST", path: "/auth/login", source };
    const answers = [];
    // anonymous login: 10 per 15 minutes per address.
    for (let i = 0; i < 11; i++) answers.push(await grpc.check(request));
    expect(answers.slice(0, 10).every((a) => (a.status?.code ?? 0) === Code.OK)).toBe(true);
    const last = answers[10];
    expect(last?.status?.code).toBe(Code.RESOURCE_EXHAUSTED);
    expect(last?.denied_response?.status?.code).toBe(429);
    const headers = headerRecord(last?.denied_response?.headers);
    expect(Number(headers["retry-after"])).toBeGreaterThan(0);
    expect(headers["x-ratelimit-limit"]).toBe("10");
    expect(headers["x-ratelimit-remaining"]).toBe("0");
    expect(headers["content-type"]).toBe("application/json");
    expect(JSON.parse(last?.denied_response?.body ?? "")).toMatchObject({
      error: "rate_limit_exceeded",
      category: "login",
      retry_after_seconds: Number(headers["retry-after"]),
    });
    expect(last?.dynamic_metadata?.fields?.decision?.stringValue).toBe("deny");
    expect(last?.dynamic_metadata?.fields?.reason?.stringValue).toBe("rate_limited");
  });

  it("answers an ambiguous request target with INVALID_ARGUMENT and the HTTP check's 400", async () => {
    const answer = await grpc.check({ path: "/api/%2e%2e/admin", source: nextAddress() });
    expect(answer.status?.code).toBe(Code.INVALID_ARGUMENT);
    expect(answer.denied_response?.status?.code).toBe(400);
    expect(JSON.parse(answer.denied_response?.body ?? "")).toMatchObject({ error: "bad_request" });
  });

  it.each(["http://tollgate.test/api/search?q=lamp", "api/search", "*"])(
    "refuses a target that is not a plain path (%s), never charging it as another route",
    async (path) => {
      const { access_token: token } = await tollgate.loginOk("alice", "secret");
      const answer = await grpc.check({
        path,
        headers: { authorization: `Bearer ${token}` },
        source: nextAddress(),
      });
      expect(answer.status?.code).toBe(Code.INVALID_ARGUMENT);
      expect(answer.denied_response?.status?.code).toBe(400);
      expect(JSON.parse(answer.denied_response?.body ?? "")).toMatchObject({ error: "bad_request" });
    },
  );

  it("answers a target longer than 8192 bytes with a 414", async () => {
    const answer = await grpc.check({ path: `/api/products?q=${"a".repeat(9000)}`, source: nextAddress() });
    expect(answer.status?.code).toBe(Code.INVALID_ARGUMENT);
    expect(answer.denied_response?.status?.code).toBe(414);
  });

  it("keys an IPv6 source by its IPV6_SUBNET prefix, as the HTTP check does", async () => {
    const a = { method: "POST", path: "/auth/login", source: "2001:db8:77:1::1" };
    const b = { ...a, source: "2001:db8:77:1:ffff::2" };
    const first = await grpc.check(a);
    const second = await grpc.check(b);
    const remaining = (x: typeof first) =>
      Number(headerRecord(x.ok_response?.response_headers_to_add)["x-ratelimit-remaining"]);
    expect(remaining(second)).toBe(remaining(first) - 1);
  });

  it("reads the headers of encode_raw_headers (header_map with raw_value) as it reads the merged map", async () => {
    const { access_token: token } = await tollgate.loginOk("alice", "secret");
    const request = checkRequest({ path: "/api/products", source: nextAddress() });
    const http = request.attributes.request.http as Record<string, unknown>;
    http.headers = undefined;
    http.header_map = { headers: [{ key: "authorization", raw_value: Buffer.from(`Bearer ${token}`) }] };
    const answer = await grpc.check(request);
    expect(answer.status?.code ?? 0).toBe(Code.OK);
    expect(headerRecord(answer.ok_response?.headers)["x-user-tier"]).toBe("free");
  });

  it("fails a CheckRequest that is no HTTP request's with INVALID_ARGUMENT, and serves the next call", async () => {
    const failed = await grpc.checkError({ attributes: { request: {} } });
    expect(failed.code, failed.details).toBe(Code.INVALID_ARGUMENT);
    expect(
      (await grpc.check({ path: "/auth/login", method: "POST", source: nextAddress() })).status?.code ?? 0,
    ).toBe(Code.OK);
  });

  it("answers malformed frames and bytes on one connection without crashing or hanging it", async () => {
    const session = http2.connect(tollgate.grpcUrl);
    try {
      // Bytes that are no protobuf message (a field with wire type 7).
      const garbage = await rawCall(session, CHECK, framed(Buffer.from([0x0f, 0xff, 0xff, 0xff])));
      expect(statusOf(garbage)).toBe(Code.INVALID_ARGUMENT);
      const truncated = await rawCall(session, CHECK, framed(Buffer.alloc(10)).subarray(0, 8));
      expect(statusOf(truncated)).toBe(Code.INVALID_ARGUMENT);
      const empty = await rawCall(session, CHECK, Buffer.alloc(0));
      expect(statusOf(empty)).toBe(Code.INVALID_ARGUMENT);
      const compressed = await rawCall(session, CHECK, framed(Buffer.from([1, 2, 3]), 1));
      expect(statusOf(compressed)).toBe(Code.UNIMPLEMENTED);
      const unknown = await rawCall(
        session,
        "/envoy.service.auth.v3.Authorization/Nope",
        framed(Buffer.alloc(0)),
      );
      expect(statusOf(unknown)).toBe(Code.UNIMPLEMENTED);
      const huge = await rawCall(session, CHECK, framed(Buffer.alloc(5 * 1024 * 1024)));
      expect(statusOf(huge)).toBe(Code.RESOURCE_EXHAUSTED);
      // An empty CheckRequest decodes (every field absent) and is refused as no HTTP request.
      const nothing = await rawCall(session, CHECK, framed(Buffer.alloc(0)));
      expect(statusOf(nothing)).toBe(Code.INVALID_ARGUMENT);
      expect(decodeURIComponent(String(nothing.headers["grpc-message"]))).toContain(
        "attributes.request.http",
      );
      // The same connection still answers a real call.
      const encoded = Buffer.from(
        (await import("../../src/frontends/envoy-grpc/protos.js")).messages.CheckRequest.encode(
          checkRequest({ method: "POST", path: "/auth/login", source: nextAddress() }),
        ).finish(),
      );
      const fine = await rawCall(session, CHECK, framed(encoded));
      expect(statusOf(fine)).toBe(Code.OK);
      expect(fine.body.length).toBeGreaterThan(5);
    } finally {
      session.close();
    }
  });

  it("survives a connection dropped with calls half sent on every method, and counts them as cancelled", async () => {
    const partial = Buffer.from("00000000050a", "hex");
    for (const path of [
      CHECK,
      "/grpc.health.v1.Health/Check",
      "/grpc.health.v1.Health/Watch",
      "/envoy.service.auth.v3.Authorization/Nope",
    ]) {
      const session = http2.connect(tollgate.grpcUrl);
      session.on("error", () => undefined);
      for (let i = 0; i < 5; i += 1) {
        const stream = session.request({
          ":method": "POST",
          ":path": path,
          "content-type": "application/grpc",
        });
        stream.on("error", () => undefined);
        stream.write(path.endsWith("Check") && !path.startsWith("/grpc") ? partial : Buffer.alloc(5));
      }
      await sleep(100);
      session.destroy();
    }
    await sleep(300);
    // Still serving, and nothing is left counted in flight.
    expect(await grpc.health("")).toEqual({ status: SERVING });
    const text = await tollgate.tollgate.metrics.registry.metrics();
    for (const line of text.split("\n").filter((l) => l.startsWith("tollgate_grpc_calls_in_flight{"))) {
      expect(line, line).toMatch(/ 0$/);
    }
    expect(text).toMatch(
      /tollgate_grpc_calls_total\{method="envoy\.service\.auth\.v3\.Authorization\/Check",status="CANCELLED"\} [1-9]/,
    );
  });

  it("answers a Watch whose request does not decode with INVALID_ARGUMENT, logging nothing as an error", async () => {
    const session = http2.connect(tollgate.grpcUrl);
    try {
      const before = tollgate.logWrites().length;
      const answer = await rawCall(
        session,
        "/grpc.health.v1.Health/Watch",
        framed(Buffer.from([0x0f, 0xff])),
      );
      expect(statusOf(answer)).toBe(Code.INVALID_ARGUMENT);
      expect(
        tollgate
          .logWrites()
          .slice(before)
          .filter((l) => l.includes('"level":"error"')),
      ).toEqual([]);
    } finally {
      session.close();
    }
  });

  it("resets a call whose request never ends, 10 s after it opened", async () => {
    const session = http2.connect(tollgate.grpcUrl);
    session.on("error", () => undefined);
    try {
      const stream = session.request({
        ":method": "POST",
        ":path": CHECK,
        "content-type": "application/grpc",
      });
      stream.write(Buffer.from("00000000050a", "hex"));
      const started = performance.now();
      const code = await new Promise<number>((resolve) => {
        stream.on("error", () => undefined);
        stream.on("close", () => resolve(stream.rstCode ?? -1));
      });
      const took = performance.now() - started;
      expect(code).toBe(http2.constants.NGHTTP2_CANCEL);
      expect(took).toBeGreaterThan(9_000);
      expect(took).toBeLessThan(13_000);
    } finally {
      session.destroy();
    }
  }, 20_000);

  it("counts checks under protocol=envoy-grpc and calls by method and status", async () => {
    await grpc.check({ method: "POST", path: "/auth/login", source: nextAddress() });
    const text = await tollgate.tollgate.metrics.registry.metrics();
    expect(text).toMatch(/tollgate_check_duration_seconds_count\{protocol="envoy-grpc"\} [1-9]/);
    expect(text).toMatch(
      /tollgate_grpc_calls_total\{method="envoy\.service\.auth\.v3\.Authorization\/Check",status="OK"\} [1-9]/,
    );
    expect(text).toMatch(/tollgate_grpc_calls_total\{method="unknown",status="UNIMPLEMENTED"\} [1-9]/);
    expect(text).toMatch(
      /tollgate_grpc_calls_in_flight\{method="envoy\.service\.auth\.v3\.Authorization\/Check"\} 0/,
    );
  });

  it("answers health for the server and for the Authorization service, NOT_FOUND for others", async () => {
    expect(await grpc.health("")).toEqual({ status: SERVING });
    expect(await grpc.health("envoy.service.auth.v3.Authorization")).toEqual({ status: SERVING });
    expect(await grpc.health("no.such.Service")).toEqual({ code: Code.NOT_FOUND });
  });
});

describe("gRPC health across start and drain", () => {
  it("reports NOT_SERVING until ready, SERVING once ready, NOT_SERVING from the stop on, and ends its watches on drain", async () => {
    const redis = connectRedis();
    const store = createRedisStore({ redis, prefix: testPrefix(), timeoutMs: 1000 });
    const config = loadConfig({ JWT_SECRET, ADMIN_TOKEN, LOG_LEVEL: "silent" });
    const readiness = createReadiness();
    const logger = createLogger("silent");
    const app = createTollgate({ config, policy: loadPolicy(undefined), store, logger, readiness });
    const serving = await serveListeners(config, app);
    const grpc = grpcClients(serving.url("grpc"));
    try {
      const watch = grpc.watch("envoy.service.auth.v3.Authorization");
      expect(await grpc.health("")).toEqual({ status: NOT_SERVING });
      readiness.markReady();
      expect(await grpc.health("")).toEqual({ status: SERVING });
      expect(await grpc.health("envoy.service.auth.v3.Authorization")).toEqual({ status: SERVING });
      readiness.markStopping();
      expect(await grpc.health("")).toEqual({ status: NOT_SERVING });
      await serving.drain("grpc");
      expect(await watch.ended).toEqual({ code: Code.OK });
      expect(watch.statuses).toEqual([NOT_SERVING, SERVING, NOT_SERVING]);
    } finally {
      grpc.close();
      await serving.close();
      await store.close();
    }
  });
});

describe("gRPC on a tollgate process", () => {
  let redisServer: RedisServer;
  let pauser: Redis;
  beforeAll(async () => {
    redisServer = await startRedisServer();
    pauser = connectRedis(redisServer.url);
  });
  afterAll(async () => {
    pauser.disconnect();
    await redisServer.stop();
  });

  it("turns health NOT_SERVING on SIGTERM, during the drain delay, while checks are still answered", async () => {
    const proc = await startTollgate({ REDIS_URL: redisServer.url, DRAIN_DELAY_MS: "3000" });
    const grpc = grpcClients(proc.grpcUrl);
    try {
      expect(await grpc.health("")).toEqual({ status: SERVING });
      const watch = grpc.watch("");
      await sleep(100);
      proc.child.kill("SIGTERM");
      await sleep(500);
      expect(await grpc.health("")).toEqual({ status: NOT_SERVING });
      const during = await grpc.check({ method: "POST", path: "/auth/login", source: nextAddress() });
      expect(during.status?.code ?? 0).toBe(Code.OK);
      expect(await watch.ended).toEqual({ code: Code.OK });
      expect(watch.statuses).toEqual([SERVING, NOT_SERVING]);
      const exit = await new Promise<number | null>((resolve) => {
        if (proc.child.exitCode !== null) resolve(proc.child.exitCode);
        else proc.child.once("exit", (code) => resolve(code));
      });
      expect(exit).toBe(0);
    } finally {
      grpc.close();
      await proc.stop("SIGKILL");
    }
  }, 30_000);

  it.each([
    ["open", "allows, marked degraded"],
    ["closed", "denies with UNAVAILABLE and a 503"],
  ] as const)(
    "with Redis paused and FAILURE_MODE=%s, %s, within REDIS_TIMEOUT_MS",
    async (mode, _outcome) => {
      const proc = await startTollgate({
        REDIS_URL: redisServer.url,
        REDIS_KEY_PREFIX: testPrefix(),
        FAILURE_MODE: mode,
        REDIS_TIMEOUT_MS: "200",
      });
      const grpc = grpcClients(proc.grpcUrl);
      try {
        const { access_token: token } = await login(proc.url, "alice", "secret");
        expect(await pauser.call("CLIENT", "PAUSE", "2000", "ALL")).toBe("OK");
        const started = performance.now();
        const answer = await grpc.check({
          path: "/api/products",
          headers: { authorization: `Bearer ${token}` },
          source: nextAddress(),
        });
        expect(performance.now() - started).toBeLessThan(1500);
        if (mode === "open") {
          expect(answer.status?.code ?? 0).toBe(Code.OK);
          expect(headerRecord(answer.ok_response?.response_headers_to_add)["x-ratelimit-degraded"]).toBe(
            "true",
          );
          expect(answer.dynamic_metadata?.fields?.reason?.stringValue).toBe("degraded");
        } else {
          expect(answer.status?.code).toBe(Code.UNAVAILABLE);
          expect(answer.denied_response?.status?.code).toBe(503);
          expect(headerRecord(answer.denied_response?.headers)["retry-after"]).toBe("1");
        }
      } finally {
        await pauser.call("CLIENT", "UNPAUSE").catch(() => undefined);
        grpc.close();
        await proc.stop("SIGKILL");
      }
    },
    30_000,
  );
});

describe("the gRPC listener over TLS (GRPC_TLS_CERT_FILE, GRPC_TLS_KEY_FILE)", () => {
  it("serves health and checks to a client that trusts its certificate, and nothing to a plaintext one", async () => {
    const { cert, key } = selfSignedCert("tollgate-grpc-tls-");
    const proc = await startTollgate({ GRPC_TLS_CERT_FILE: cert, GRPC_TLS_KEY_FILE: key });
    const tls = grpcClients(proc.grpcUrl, { rootCert: readFileSync(cert) });
    const plain = grpcClients(proc.grpcUrl);
    try {
      expect(await tls.health("")).toEqual({ status: SERVING });
      const answer = await tls.check({ method: "POST", path: "/auth/login", source: nextAddress() });
      expect(answer.status?.code ?? 0).toBe(Code.OK);
      expect(await plain.health("")).toEqual({ code: Code.UNAVAILABLE });
    } finally {
      tls.close();
      plain.close();
      await proc.stop("SIGKILL");
    }
  }, 30_000);
});

describe("exact limits over gRPC across two tollgate processes", () => {
  const procs: TollgateProcess[] = [];
  beforeAll(async () => {
    const env = { REDIS_URL: redisUrl(), REDIS_KEY_PREFIX: testPrefix(), REDIS_TIMEOUT_MS: "2000" };
    procs.push(await startTollgate(env), await startTollgate(env));
  }, 40_000);
  afterAll(async () => {
    await Promise.all(procs.map((proc) => proc.stop("SIGKILL")));
  });

  it("allows exactly 100 of 600 concurrent checks of one free user, spread over both processes", async () => {
    const [a, b] = procs as [TollgateProcess, TollgateProcess];
    const username = `grpc_${randomBytes(5).toString("hex")}`;
    const created = await fetch(`${a.adminUrl}/admin/users`, {
      method: "POST",
      headers: { authorization: `Bearer ${ADMIN_TOKEN}`, "content-type": "application/json" },
      body: JSON.stringify({ username, password: "grpc-password-42", tier: "free" }),
    });
    expect(created.status).toBe(201);
    const { access_token: token } = await login(b.url, username, "grpc-password-42");
    const clients = [grpcClients(a.grpcUrl), grpcClients(b.grpcUrl)];
    try {
      const answers = await Promise.all(
        Array.from({ length: 600 }, (_, i) =>
          (clients[i % 2] as GrpcClients).check({
            path: "/api/products",
            headers: { authorization: `Bearer ${token}` },
            // Each from its own address: only the user's own limit (100 per hour) applies.
            source: nextAddress(),
          }),
        ),
      );
      const codes = answers.map((answer) => answer.status?.code ?? 0);
      expect(codes.filter((code) => code === Code.OK)).toHaveLength(100);
      expect(codes.filter((code) => code === Code.RESOURCE_EXHAUSTED)).toHaveLength(500);
    } finally {
      for (const client of clients) client.close();
    }
  }, 60_000);
});
