// Tracing and request ids against real tollgate processes, a Redis of this file's own and an OTLP
// receiver of the tests' own: spans continue the caller's trace, store calls are their children,
// sampling is honoured, and without an endpoint the OpenTelemetry SDK is never even loaded.
import { connect } from "node:http2";
import { Metadata } from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { messages } from "../../src/frontends/envoy-grpc/protos.js";
import { authorizationClient, type CheckResponse, checkRequest } from "../support/grpc-client.js";
import { login, send } from "../support/http-client.mjs";
import { freePort } from "../support/local.mjs";
import { type OtlpReceiver, type ReceivedSpan, startOtlpReceiver } from "../support/otlp-receiver.js";
import {
  type RedisServer,
  startRedisServer,
  startTollgate,
  type TollgateProcess,
} from "../support/processes.mjs";
import { ADMIN_TOKEN } from "../support/secrets.mjs";

const RLS_CONFIG = "test/fixtures/rls/valid/basic.yaml";
const SERVER = 2;
const CLIENT = 3;

let redis: RedisServer;
let receiver: OtlpReceiver;
let silentReceiver: OtlpReceiver;
let traced: TollgateProcess;
let sampledOff: TollgateProcess;
let untraced: TollgateProcess;
let protobuf: TollgateProcess;
let collectorDown: TollgateProcess;
let protobufReceiver: OtlpReceiver;

const hex = (bytes: number) =>
  Array.from({ length: bytes }, () =>
    Math.floor(Math.random() * 256)
      .toString(16)
      .padStart(2, "0"),
  ).join("");
/** A caller's trace: a fresh trace id and span id, sampled unless told. */
const callerTrace = (sampled = true) => {
  const traceId = hex(16);
  const spanId = hex(8);
  return { traceId, spanId, traceparent: `00-${traceId}-${spanId}-${sampled ? "01" : "00"}` };
};

const common = (prefix: string) => ({
  REDIS_URL: redis.url,
  REDIS_KEY_PREFIX: prefix,
  RLS_CONFIG,
  // A busy test machine can hold a store call past the 15 ms and 100 ms defaults: the spans, not the
  // deadlines, are what this file checks.
  RLS_TIMEOUT_MS: "2000",
  REDIS_TIMEOUT_MS: "2000",
  // Spans leave in batches every 50 ms instead of 5 s: the tests wait for them.
  OTEL_BSP_SCHEDULE_DELAY: "50",
  OTEL_EXPORTER_OTLP_PROTOCOL: "http/json",
});

beforeAll(async () => {
  redis = await startRedisServer();
  [receiver, silentReceiver, protobufReceiver] = await Promise.all([
    startOtlpReceiver(),
    startOtlpReceiver(),
    startOtlpReceiver(),
  ]);
  // A port nothing listens on: the collector is down.
  const down = await freePort();
  [traced, sampledOff, untraced, protobuf, collectorDown] = await Promise.all([
    startTollgate({
      ...common("trace-a:"),
      OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
      OTEL_SERVICE_NAME: "tollgate-e2e",
      LOG_LEVEL: "debug",
      NODE_DEBUG: "module",
    }),
    startTollgate({
      ...common("trace-b:"),
      OTEL_EXPORTER_OTLP_ENDPOINT: silentReceiver.url,
      OTEL_TRACES_SAMPLER: "always_off",
    }),
    // Everything of the others but the endpoint: tracing stays off.
    startTollgate({ ...common("trace-c:"), OTEL_TRACES_SAMPLER: "always_on", NODE_DEBUG: "module" }),
    // The specification's default protocol, http/protobuf, and a traces endpoint of its own.
    startTollgate({
      REDIS_URL: redis.url,
      REDIS_KEY_PREFIX: "trace-d:",
      OTEL_BSP_SCHEDULE_DELAY: "50",
      OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: `${protobufReceiver.url}/custom/traces`,
    }),
    startTollgate({ ...common("trace-e:"), OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${down}` }),
  ]);
});

afterAll(async () => {
  await Promise.all([traced, sampledOff, untraced, protobuf, collectorDown].map((p) => p?.stop("SIGKILL")));
  await Promise.all([receiver?.close(), silentReceiver?.close(), protobufReceiver?.close()]);
  await redis?.stop();
});

const bearer = async (proc: TollgateProcess, user = "bob_pro") =>
  `Bearer ${(await login(proc.url, user)).access_token}`;

const ofTrace = (traceId: string, name?: string) => (spans: ReceivedSpan[]) =>
  spans.filter((s) => s.traceId === traceId && (name === undefined || s.name === name));

/** The server span of `traceId` named `name`, and the spans whose parent it is. */
async function spanWithChildren(traceId: string, name: string, children: number) {
  const [span] = await receiver.waitFor(ofTrace(traceId, name), `${name} span of trace ${traceId}`);
  const kids = await receiver.waitFor((spans) => {
    const found = spans.filter((s) => s.parentSpanId === span?.spanId);
    return found.length >= children ? found : [];
  }, `${children} child span(s) of ${name}`);
  return { span: span as ReceivedSpan, children: kids };
}

/** The JSON log lines of a process that carry `requestId`. */
const linesWith = (proc: TollgateProcess, requestId: string) =>
  proc
    .output()
    .split("\n")
    .filter((line) => line.startsWith("{") && line.includes(requestId))
    .map((line) => JSON.parse(line) as Record<string, unknown>);

/** One unary gRPC call with metadata, over a connection of its own: the answer's grpc-status. */
function grpcUnary(url: string, path: string, message: Uint8Array, headers: Record<string, string>) {
  return new Promise<string | undefined>((resolve, reject) => {
    const session = connect(url);
    session.on("error", reject);
    const frame = Buffer.alloc(5 + message.length);
    frame.writeUInt32BE(message.length, 1);
    frame.set(message, 5);
    const stream = session.request({
      ":method": "POST",
      ":path": path,
      "content-type": "application/grpc",
      te: "trailers",
      ...headers,
    });
    let status: string | undefined;
    stream.on("response", (h) => {
      status ??= h["grpc-status"] as string | undefined;
    });
    stream.on("trailers", (h) => {
      status = h["grpc-status"] as string | undefined;
    });
    stream.on("error", reject);
    stream.resume();
    stream.on("end", () => {
      session.close();
      resolve(status);
    });
    stream.end(frame);
  });
}

describe("with OTEL_EXPORTER_OTLP_ENDPOINT set", () => {
  it("exports a check's span in the proxy's trace, its parent the proxy's span, with the store call as its child", async () => {
    const authorization = await bearer(traced);
    const caller = callerTrace();
    const reply = await send(`${traced.checkUrl}/ext_authz/api/products`, {
      headers: { authorization, traceparent: caller.traceparent, "x-request-id": "req-envoy-http-1" },
    });
    expect(reply.status).toBe(200);
    const { span, children } = await spanWithChildren(caller.traceId, "check envoy", 1);
    expect(span.parentSpanId).toBe(caller.spanId);
    expect(span.kind).toBe(SERVER);
    expect(span.attributes).toMatchObject({
      "tollgate.protocol": "envoy",
      "tollgate.decision": "allow",
      "tollgate.reason": "ok",
      "tollgate.tier": "pro",
      "tollgate.request_id": "req-envoy-http-1",
      "http.request.method": "GET",
      "http.response.status_code": 200,
    });
    expect(span.resource["service.name"]).toBe("tollgate-e2e");
    expect(children.map((c) => [c.name, c.kind, c.attributes["db.system.name"]])).toEqual([
      ["limiter.limit", CLIENT, "redis"],
    ]);
    // No token in a span.
    expect(JSON.stringify(receiver.spans())).not.toContain(authorization.slice(7));
  });

  it("exports nginx's checks and Envoy's gRPC checks alike; a gRPC call's own traceparent wins over the request's", async () => {
    const authorization = await bearer(traced);
    const viaNginx = callerTrace();
    await send(`${traced.checkUrl}/nginx/auth`, {
      headers: {
        authorization,
        "x-original-method": "GET",
        "x-original-uri": "/api/products",
        traceparent: viaNginx.traceparent,
      },
    });
    const nginx = await spanWithChildren(viaNginx.traceId, "check nginx", 1);
    expect(nginx.span.parentSpanId).toBe(viaNginx.spanId);

    const request = callerTrace();
    const call = callerTrace();
    const client = authorizationClient(traced.grpcUrl);
    const metadata = new Metadata();
    metadata.set("traceparent", call.traceparent);
    const answer = await new Promise<CheckResponse | undefined>((resolve, reject) => {
      (client as unknown as { Check: (...args: unknown[]) => void }).Check(
        checkRequest({ path: "/api/products", headers: { authorization, traceparent: request.traceparent } }),
        metadata,
        { deadline: Date.now() + 10_000 },
        (error: Error | null, response?: CheckResponse) =>
          error === null ? resolve(response) : reject(error),
      );
    });
    client.close();
    expect(answer?.status?.code ?? 0).toBe(0);
    const grpc = await spanWithChildren(call.traceId, "check envoy-grpc", 1);
    expect(grpc.span.parentSpanId).toBe(call.spanId);
    expect(grpc.children[0]?.name).toBe("limiter.limit");

    // Without the call's own, the proxied request's traceparent.
    const alone = callerTrace();
    const onlyRequest = authorizationClient(traced.grpcUrl);
    await new Promise<void>((resolve, reject) =>
      onlyRequest.Check(
        checkRequest({ path: "/api/products", headers: { authorization, traceparent: alone.traceparent } }),
        { deadline: Date.now() + 10_000 },
        (error) => (error === null ? resolve() : reject(error)),
      ),
    );
    onlyRequest.close();
    const fromRequest = await spanWithChildren(alone.traceId, "check envoy-grpc", 1);
    expect(fromRequest.span.parentSpanId).toBe(alone.spanId);
  });

  it("exports the rate limit service's calls, over gRPC and POST /json, with their store call", async () => {
    const request = {
      domain: "test-domain",
      descriptors: [
        {
          entries: [
            { key: "key1", value: "value1" },
            { key: "subkey1", value: "anything" },
          ],
        },
      ],
    };
    const overGrpc = callerTrace();
    const status = await grpcUnary(
      traced.grpcUrl,
      "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
      messages.RateLimitRequest.encode(messages.RateLimitRequest.fromObject(request)).finish(),
      { traceparent: overGrpc.traceparent, "x-request-id": "req-rls-grpc" },
    );
    expect(status).toBe("0");
    const grpc = await spanWithChildren(overGrpc.traceId, "rls envoy-grpc", 1);
    expect(grpc.span.parentSpanId).toBe(overGrpc.spanId);
    expect(grpc.span.attributes).toMatchObject({
      "tollgate.rls.domain": "test-domain",
      "tollgate.rls.overall_code": "OK",
      "tollgate.request_id": "req-rls-grpc",
    });
    expect(grpc.children[0]?.name).toBe("limiter.limit");

    const overJson = callerTrace();
    const reply = await send(`${traced.checkUrl}/json`, {
      method: "POST",
      headers: { traceparent: overJson.traceparent },
      body: request,
    });
    expect(reply.status).toBe(200);
    const json = await spanWithChildren(overJson.traceId, "rls json", 1);
    expect(json.span.parentSpanId).toBe(overJson.spanId);
  });

  it("exports a login and an admin call, named by their routes, each with its store calls as children", async () => {
    const caller = callerTrace();
    const reply = await send(`${traced.url}/auth/login`, {
      method: "POST",
      headers: { traceparent: caller.traceparent, "x-request-id": "req-login-1" },
      body: { username: "alice", password: "secret" },
    });
    expect(reply.status).toBe(200);
    const { span, children } = await spanWithChildren(caller.traceId, "POST /auth/login", 2);
    expect(span.parentSpanId).toBe(caller.spanId);
    expect(span.attributes).toMatchObject({
      "http.route": "/auth/login",
      "http.response.status_code": 200,
      "tollgate.request_id": "req-login-1",
    });
    const names = children.map((c) => c.name);
    expect(names).toContain("users.findByUsername");
    expect(names).toContain("sessions.create");
    expect(JSON.stringify(span)).not.toContain("secret");

    const admin = callerTrace();
    const user = await send(`${traced.adminUrl}/admin/users/demo-alice`, {
      headers: { authorization: `Bearer ${ADMIN_TOKEN}`, traceparent: admin.traceparent },
    });
    expect(user.status).toBe(200);
    const adminSpan = await spanWithChildren(admin.traceId, "GET /admin/users/:id", 1);
    expect(adminSpan.span.attributes["http.route"]).toBe("/admin/users/:id");
    expect(adminSpan.children.map((c) => c.name)).toEqual(["users.get"]);
  });

  it("follows the caller's decision: a trace the proxy did not sample yields no span", async () => {
    const authorization = await bearer(traced);
    const unsampled = callerTrace(false);
    await send(`${traced.checkUrl}/ext_authz/api/products`, {
      headers: { authorization, traceparent: unsampled.traceparent },
    });
    // Spans leave in order: once a later check's span arrived, the earlier one would have too.
    const later = callerTrace();
    await send(`${traced.checkUrl}/ext_authz/api/products`, {
      headers: { authorization, traceparent: later.traceparent },
    });
    await receiver.waitFor(ofTrace(later.traceId, "check envoy"), "the later check's span");
    expect(ofTrace(unsampled.traceId)(receiver.spans())).toEqual([]);
    // The SDK was loaded, here: the counterpart of the untraced process's test below.
    expect(traced.output()).toContain("@opentelemetry/sdk-trace-base");
    expect(traced.output()).toContain('"event":"tracing"');
  });
});

it("exports OTLP protobuf by default, to OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as given", async () => {
  const authorization = await bearer(protobuf);
  const caller = callerTrace();
  await send(`${protobuf.checkUrl}/ext_authz/api/products`, {
    headers: { authorization, traceparent: caller.traceparent },
  });
  const traceId = Buffer.from(caller.traceId, "hex");
  const until = Date.now() + 10_000;
  while (!protobufReceiver.exports.some((e) => e.body.includes(traceId)) && Date.now() < until) {
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  const [sent] = protobufReceiver.exports.filter((e) => e.body.includes(traceId));
  expect(sent?.path).toBe("/custom/traces");
  expect(sent?.contentType).toBe("application/x-protobuf");
  // The caller's span id, as the check span's parent, and the span's name, in the message's bytes.
  expect(sent?.body.includes(Buffer.from(caller.spanId, "hex"))).toBe(true);
  expect(sent?.body.includes(Buffer.from("check envoy"))).toBe(true);
});

it("answers checks as ever while the collector is down, and says so once", async () => {
  const authorization = await bearer(collectorDown);
  for (let i = 0; i < 20; i += 1) {
    const reply = await send(`${collectorDown.checkUrl}/ext_authz/api/products`, {
      headers: { authorization, traceparent: callerTrace().traceparent },
    });
    expect(reply.status).toBe(200);
  }
  const failures = () =>
    collectorDown
      .output()
      .split("\n")
      .filter((l) => l.includes('"event":"trace_export_failed"'));
  const until = Date.now() + 10_000;
  while (failures().length === 0 && Date.now() < until) await new Promise((r) => setTimeout(r, 50));
  expect(failures()).toHaveLength(1);
  expect(JSON.parse(failures()[0] as string)).toMatchObject({ level: "warn", suppressed: 0 });
});

describe("sampling off, or no endpoint", () => {
  it("exports nothing with OTEL_TRACES_SAMPLER=always_off", async () => {
    const authorization = await bearer(sampledOff);
    for (let i = 0; i < 5; i += 1) {
      const caller = callerTrace();
      await send(`${sampledOff.checkUrl}/ext_authz/api/products`, {
        headers: { authorization, traceparent: caller.traceparent },
      });
    }
    await send(`${sampledOff.adminUrl}/admin/users/demo-alice`, {
      headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
    });
    // Ten batch periods.
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(silentReceiver.exports).toEqual([]);
  });

  it("never loads the OpenTelemetry SDK without an endpoint, whatever else is set", async () => {
    const authorization = await bearer(untraced);
    const caller = callerTrace();
    const reply = await send(`${untraced.checkUrl}/ext_authz/api/products`, {
      headers: { authorization, traceparent: caller.traceparent },
    });
    expect(reply.status).toBe(200);
    await new Promise((resolve) => setTimeout(resolve, 200));
    // NODE_DEBUG=module names every package Node resolves: none of OpenTelemetry's.
    expect(untraced.output()).toContain("MODULE");
    expect(untraced.output()).not.toContain("@opentelemetry/");
    expect(untraced.output()).not.toContain('"event":"tracing"');
    expect(ofTrace(caller.traceId)(receiver.spans())).toEqual([]);
  });
});

describe("request ids in log lines", () => {
  it("writes a check's request id on its log line, whichever protocol carried it", async () => {
    const authorization = await bearer(traced);
    await send(`${traced.checkUrl}/ext_authz/api/products`, {
      headers: { authorization, "x-request-id": "req-log-envoy" },
    });
    const client = authorizationClient(traced.grpcUrl);
    const request = checkRequest({
      path: "/api/products",
      headers: { authorization, "x-request-id": "req-log-grpc" },
    });
    // attributes.request.http.id: Envoy's stream id, which no other log or header carries.
    (request.attributes.request.http as Record<string, unknown>).id = "9263104775808817302";
    await new Promise<void>((resolve, reject) =>
      client.Check(request, { deadline: Date.now() + 10_000 }, (error) =>
        error === null ? resolve() : reject(error),
      ),
    );
    client.close();
    for (const [id, protocol] of [
      ["req-log-envoy", "envoy"],
      ["req-log-grpc", "envoy-grpc"],
    ]) {
      // A check's line follows its answer: it may be written a moment after the client has it.
      for (let i = 0; i < 40 && linesWith(traced, id as string).length === 0; i += 1)
        await new Promise((r) => setTimeout(r, 25));
      const [line] = linesWith(traced, id as string);
      expect(line, id).toMatchObject({
        event: "check",
        requestId: id,
        protocol,
        decision: "allow",
        status: 200,
      });
    }
  });

  it("writes it on a denial's line, a login's and an admin call's", async () => {
    const authorization = await bearer(traced, "alice");
    // alice's free tier allows 100 an hour: the 101st is denied, and logged.
    let status = 200;
    for (let i = 0; i < 120 && status !== 429; i += 1) {
      status = (
        await send(`${traced.checkUrl}/ext_authz/api/products`, {
          headers: { authorization, "x-request-id": `req-deny-${i}` },
        })
      ).status;
    }
    expect(status).toBe(429);
    // The line follows the answer: it may be written a moment after the client has the 429.
    const denials = () =>
      traced
        .output()
        .split("\n")
        .filter((line) => line.includes('"event":"rate_limited"'))
        .map((line) => JSON.parse(line) as Record<string, unknown>);
    for (let i = 0; i < 40 && denials().length === 0; i += 1) await new Promise((r) => setTimeout(r, 25));
    expect(denials()[0]?.requestId).toMatch(/^req-deny-\d+$/);

    await send(`${traced.url}/auth/login`, {
      method: "POST",
      headers: { "x-request-id": "req-login-failed" },
      body: { username: "alice", password: "wrong password" },
    });
    expect(linesWith(traced, "req-login-failed")).toMatchObject([{ event: "login_failed" }]);

    const created = await send(`${traced.adminUrl}/admin/users`, {
      method: "POST",
      headers: { authorization: `Bearer ${ADMIN_TOKEN}`, "x-request-id": "req-admin-create" },
      body: { username: "traced-user", password: "a long enough password", tier: "free" },
    });
    expect(created.status).toBe(201);
    expect(linesWith(traced, "req-admin-create")).toMatchObject([{ event: "user_created" }]);
  });
});
