// The Envoy harness's gRPC mode itself (envoy/envoy-grpc.yaml), against a scripted grpc-js
// Authorization server that records each CheckRequest and answers a fixed CheckResponse, and a
// recording upstream: what the CheckRequest holds, and what Envoy does with each kind of answer.
import * as grpc from "@grpc/grpc-js";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { envoyYamlText } from "../support/envoy-config.js";
import { EXT_AUTHZ_NAMESPACE } from "../support/envoy-ext-authz-grpc.js";
import { type EnvoyHarness, startEnvoyHarness } from "../support/envoy-harness.js";
import { authorizationServiceDefinition, type CheckResponse } from "../support/grpc-client.js";
import { closeClient, send } from "../support/http-client.mjs";
import { type Recorded, type RecordingServer, recordingServer } from "../support/recording-server.js";

type Answer =
  | { response: CheckResponse; delayMs?: number }
  | { error: { code: number; details: string }; delayMs?: number };

type CheckRequestSeen = {
  attributes: {
    source: { address: { socket_address: { address: string; port_value: number } } };
    destination: { address: { socket_address: { address: string; port_value: number } } };
    request: {
      http: {
        id: string;
        method: string;
        headers: Record<string, string>;
        path: string;
        host: string;
        scheme: string;
        protocol: string;
        size?: string;
      };
    };
  };
};

const OK: CheckResponse = { status: { code: 0 } };

/** A grpc-js Authorization server answering whatever `answer()` says, recording every request. */
async function scriptedAuthorization(answer: () => Answer) {
  const received: CheckRequestSeen[] = [];
  const server = new grpc.Server();
  server.addService(authorizationServiceDefinition(), {
    Check(
      call: grpc.ServerUnaryCall<CheckRequestSeen, CheckResponse>,
      callback: grpc.sendUnaryData<CheckResponse>,
    ) {
      received.push(call.request);
      const reply = answer();
      setTimeout(() => {
        if ("error" in reply)
          callback({ code: reply.error.code, details: reply.error.details, name: "", message: "" });
        else callback(null, reply.response);
      }, reply.delayMs ?? 0);
    },
  });
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync("127.0.0.1:0", grpc.ServerCredentials.createInsecure(), (error, bound) =>
      error === null ? resolve(bound) : reject(error),
    ),
  );
  return {
    url: `http://127.0.0.1:${port}`,
    received,
    close: () => new Promise<void>((resolve) => server.tryShutdown(() => resolve())),
  };
}

const option = (key: string, value: string, append?: boolean, append_action?: number) => ({
  header: { key, value },
  ...(append === undefined ? {} : { append: { value: append } }),
  ...(append_action === undefined ? {} : { append_action }),
});

let lastHost = 60;
const newClientAddress = (): string => `127.0.0.${lastHost++}`;

describe("the Envoy harness in gRPC mode (envoy-grpc.yaml), against a scripted Authorization server", () => {
  let checkAnswer: Answer = { response: OK };
  let authz: Awaited<ReturnType<typeof scriptedAuthorization>>;
  let upstream: RecordingServer;
  let envoy: EnvoyHarness;

  beforeAll(async () => {
    authz = await scriptedAuthorization(() => checkAnswer);
    upstream = await recordingServer((req) => ({
      status: 200,
      headers: { "content-type": "application/json", "x-ratelimit-limit": "999", "x-upstream": "u" },
      body: JSON.stringify(req),
    }));
    envoy = await startEnvoyHarness({
      config: "envoy-grpc.yaml",
      clusters: { tollgate_grpc: authz.url, tollgate_public: upstream.url, upstream: upstream.url },
    });
  });

  afterEach(() => {
    checkAnswer = { response: OK };
    authz.received.length = 0;
    upstream.received.length = 0;
    envoy.accessLog.length = 0;
  });

  afterAll(async () => {
    await envoy?.close();
    await Promise.all([authz?.close(), upstream?.close()]);
    closeClient();
  });

  it("reads envoy-grpc.yaml: the gRPC check to tollgate_grpc with its timeout, fail-closed 503, the header strip", () => {
    const filters = envoy.config.filters;
    expect(filters.map((f) => f.kind)).toEqual(["header_mutation", "ext_authz_grpc", "router"]);
    expect(filters[1]).toMatchObject({
      cluster: "tollgate_grpc",
      authority: "tollgate_grpc",
      timeoutMs: 250,
      failureModeAllow: false,
      statusOnError: 503,
    });
    expect(filters[0]).toMatchObject({
      removeFromRequest: [
        "x-user-id",
        "x-user-tier",
        "x-session-id",
        "x-tollgate-client-ip",
        "x-http-method-override",
        "x-http-method",
        "x-method-override",
        "x-original-url",
        "x-rewrite-url",
      ],
    });
    expect(envoy.config.clusters.get("tollgate_grpc")).toMatchObject({
      endpoints: [{ address: "tollgate", port: 8081 }],
      idleTimeoutMs: 60_000,
    });
    expect(envoy.config.routes.map((r) => r.cluster)).toEqual([
      "tollgate_public",
      "tollgate_public",
      "tollgate_public",
      "tollgate_public",
      "upstream",
    ]);
  });

  it("builds the CheckRequest as Envoy does: the connection's peer, every header lower-cased and merged, pseudo-headers, path with query", async () => {
    const address = newClientAddress();
    await send(`${envoy.url}/api/orders?draft=1&x=%20y`, {
      method: "POST",
      body: { items: [] },
      headers: {
        Authorization: "Bearer abc",
        "X-Device-Name": "phone",
        "x-forwarded-for": "203.0.113.9",
        "x-user-id": "bob",
        "x-tollgate-client-ip": "203.0.113.9",
        Accept: ["application/json", "text/plain"],
      },
      localAddress: address,
    });
    expect(authz.received).toHaveLength(1);
    const { attributes } = authz.received[0] as CheckRequestSeen;
    expect(attributes.source.address.socket_address.address).toBe(address);
    expect(attributes.source.address.socket_address.port_value).toBeGreaterThan(0);
    expect(attributes.destination.address.socket_address).toEqual({
      address: "127.0.0.1",
      port_value: Number(new URL(envoy.url).port),
    });
    const http = attributes.request.http;
    expect(http).toMatchObject({
      method: "POST",
      path: "/api/orders?draft=1&x=%20y",
      host: new URL(envoy.url).host,
      scheme: "http",
      protocol: "HTTP/1.1",
    });
    expect(http.id).toMatch(/^\d+$/);
    expect(http.headers).toEqual({
      ":authority": new URL(envoy.url).host,
      ":path": "/api/orders?draft=1&x=%20y",
      ":method": "POST",
      ":scheme": "http",
      authorization: "Bearer abc",
      "x-device-name": "phone",
      accept: "application/json,text/plain",
      "content-type": "application/json",
      "content-length": expect.stringMatching(/^\d+$/),
      "x-forwarded-for": `203.0.113.9,${address}`,
      "x-forwarded-proto": "http",
      "x-request-id": expect.stringMatching(/^[0-9a-f-]{36}$/),
    });
    // The header_mutation filter ran first: neither identity nor the client-IP header reach the check.
    expect(http.headers["x-user-id"]).toBeUndefined();
    expect(JSON.parse((upstream.received[0] as Recorded).body)).toEqual({ items: [] });
  });

  it("on OK sets headers with append false or absent, appends with append true only to existing ones, removes headers_to_remove but never :path or Host", async () => {
    checkAnswer = {
      response: {
        status: { code: 0 },
        ok_response: {
          headers: [
            option("x-user-id", "u1", false),
            option("X-User-Tier", "pro"),
            option("x-trace", "t2", true),
            option("x-absent", "a", true),
          ],
          headers_to_remove: ["x-session-id", "Cookie", ":path", "host"],
        },
      },
    };
    const res = await send(`${envoy.url}/api/products`, {
      headers: { "x-trace": "t1", cookie: "a=1" },
      localAddress: newClientAddress(),
    });
    expect(res.status).toBe(200);
    const forwarded = upstream.received[0] as Recorded;
    expect(forwarded.url).toBe("/api/products");
    expect(forwarded.headers).toMatchObject({ "x-user-id": "u1", "x-user-tier": "pro", "x-trace": "t1,t2" });
    expect(forwarded.headers.host).toBe(new URL(envoy.url).host);
    expect(forwarded.headers["x-absent"]).toBeUndefined();
    expect(forwarded.headers.cookie).toBeUndefined();
    expect(forwarded.headers["x-session-id"]).toBeUndefined();
  });

  it("on OK overwrites a forged identity header with one value, never a second entry", async () => {
    const yaml = envoyYamlText("envoy-grpc.yaml").replace(
      /- remove: x-user-id\n\s*- remove: x-user-tier\n\s*- remove: x-session-id\n\s*/,
      "",
    );
    const unstripped = await startEnvoyHarness({
      yaml,
      clusters: { tollgate_grpc: authz.url, tollgate_public: upstream.url, upstream: upstream.url },
    });
    try {
      checkAnswer = {
        response: {
          status: { code: 0 },
          ok_response: { headers: [option("x-user-id", "u1", false)], headers_to_remove: ["x-session-id"] },
        },
      };
      await send(`${unstripped.url}/api/products`, {
        headers: { "x-user-id": "bob", "x-session-id": "forged" },
        localAddress: newClientAddress(),
      });
      // The forged values did reach the check here, without the strip ...
      expect((authz.received[0] as CheckRequestSeen).attributes.request.http.headers["x-user-id"]).toBe(
        "bob",
      );
      // ... and the answer alone kept them from the upstream.
      const forwarded = upstream.received[0] as Recorded;
      expect(forwarded.headers["x-user-id"]).toBe("u1");
      expect(forwarded.headers["x-session-id"]).toBeUndefined();
    } finally {
      await unstripped.close();
    }
  });

  it("on OK puts response_headers_to_add on the response: append false sets, true or absent adds, append_action is read when append is absent", async () => {
    checkAnswer = {
      response: {
        status: { code: 0 },
        ok_response: {
          response_headers_to_add: [
            option("X-RateLimit-Limit", "5", false),
            option("x-upstream", "c1", true),
            option("ratelimit", '"pro-general";r=4;t=60'),
            option("x-upstream", "c2", undefined, 1), // ADD_IF_ABSENT: present, so not added
            option("x-if-absent", "yes", undefined, 1),
            option("x-not-there", "no", undefined, 3), // OVERWRITE_IF_EXISTS: absent, so not added
            option("content-type", "application/x-tollgate", undefined, 2), // OVERWRITE_IF_EXISTS_OR_ADD
          ],
        },
      },
    };
    const res = await send(`${envoy.url}/api/products`, { localAddress: newClientAddress() });
    expect(res.status).toBe(200);
    expect(res.header("x-ratelimit-limit")).toBe("5");
    expect(res.headers["x-upstream"]).toEqual(["u", "c1"]);
    expect(res.header("ratelimit")).toBe('"pro-general";r=4;t=60');
    expect(res.header("x-if-absent")).toBe("yes");
    expect(res.headers["x-not-there"]).toBeUndefined();
    expect(res.header("content-type")).toBe("application/x-tollgate");
    // Nothing of it went upstream.
    expect((upstream.received[0] as Recorded).headers["x-ratelimit-limit"]).toBeUndefined();
  });

  it("puts an allow's response headers on a local reply the router sends later (an upstream timeout)", async () => {
    checkAnswer = {
      response: {
        status: { code: 0 },
        ok_response: { response_headers_to_add: [option("x-ratelimit-remaining", "3", false)] },
      },
    };
    const yaml = envoyYamlText("envoy-grpc.yaml").replace(
      "route: { cluster: upstream, timeout: 10s }",
      "route: { cluster: upstream, timeout: 0.1s }",
    );
    const slowUpstream = await recordingServer(() => ({ status: 200, delayMs: 1000 }));
    const harness = await startEnvoyHarness({
      yaml,
      clusters: { tollgate_grpc: authz.url, tollgate_public: upstream.url, upstream: slowUpstream.url },
    });
    try {
      const res = await send(`${harness.url}/api/products`, { localAddress: newClientAddress() });
      expect(res.status).toBe(504);
      expect(res.header("x-ratelimit-remaining")).toBe("3");
    } finally {
      await harness.close();
      await slowUpstream.close();
    }
  });

  it("records dynamic_metadata under envoy.filters.http.ext_authz, with ext_authz_duration on an allow only", async () => {
    const fields = {
      user_id: { stringValue: "u1" },
      decision: { stringValue: "allow" },
      nested: { structValue: { fields: { n: { numberValue: 2 } } } },
    };
    checkAnswer = { response: { status: { code: 0 }, dynamic_metadata: { fields } } };
    await send(`${envoy.url}/api/products?x=1`, { localAddress: newClientAddress() });
    checkAnswer = {
      response: {
        status: { code: 16 },
        denied_response: { status: { code: 401 } },
        dynamic_metadata: { fields: { decision: { stringValue: "deny" } } },
      },
    };
    await send(`${envoy.url}/api/products`, { localAddress: newClientAddress() });
    checkAnswer = { error: { code: grpc.status.UNAVAILABLE, details: "down" } };
    await send(`${envoy.url}/api/products`, { localAddress: newClientAddress() });
    await send(`${envoy.url}/health`, { localAddress: newClientAddress() });

    const [allowed, denied, failed, health] = envoy.accessLog;
    expect(allowed).toMatchObject({ method: "GET", path: "/api/products?x=1", status: 200, flags: [] });
    expect(allowed?.dynamicMetadata[EXT_AUTHZ_NAMESPACE]).toEqual({
      user_id: "u1",
      decision: "allow",
      nested: { n: 2 },
      ext_authz_duration: expect.any(Number),
    });
    expect(denied).toMatchObject({ status: 401, flags: ["UAEX"] });
    expect(denied?.dynamicMetadata).toEqual({ [EXT_AUTHZ_NAMESPACE]: { decision: "deny" } });
    expect(failed).toMatchObject({ status: 503, flags: ["UAEX"], dynamicMetadata: {} });
    expect(health).toMatchObject({ path: "/health", status: 200, dynamicMetadata: {} });
  });

  it("on a denial sends denied_response's status, headers and body; append true headers are dropped; the upstream sees nothing", async () => {
    checkAnswer = {
      response: {
        status: { code: 8 },
        denied_response: {
          status: { code: 429 },
          headers: [
            option("content-type", "application/json", false),
            option("Retry-After", "7", false),
            option("x-ratelimit-remaining", "0"),
            option("x-appended", "1", true),
          ],
          body: '{"error":"rate_limit_exceeded"}',
        },
      },
    };
    const res = await send(`${envoy.url}/api/search?q=a`, { localAddress: newClientAddress() });
    expect(res.status).toBe(429);
    expect(res.json()).toEqual({ error: "rate_limit_exceeded" });
    expect(res.header("content-type")).toBe("application/json");
    expect(res.header("retry-after")).toBe("7");
    expect(res.header("x-ratelimit-remaining")).toBe("0");
    expect(res.headers["x-appended"]).toBeUndefined();
    expect(upstream.received).toHaveLength(0);
  });

  it.each([
    ["without a denied_response", { status: { code: 7 } }],
    ["with a denied_response without a status", { status: { code: 7 }, denied_response: { body: "no" } }],
    ["with status code 0", { status: { code: 16 }, denied_response: { status: { code: 0 }, body: "no" } }],
  ])("denies with 403 %s", async (_what, response) => {
    checkAnswer = { response: response as CheckResponse };
    const res = await send(`${envoy.url}/api/products`, { localAddress: newClientAddress() });
    expect(res.status).toBe(403);
    expect(res.text).toBe("denied_response" in response ? "no" : "");
    expect(upstream.received).toHaveLength(0);
  });

  it("maps a 503 denial (UAEX) through local_reply_config as a failed call: the JSON body and Retry-After: 1", async () => {
    checkAnswer = {
      response: {
        status: { code: 14 },
        denied_response: {
          status: { code: 503 },
          headers: [option("retry-after", "5", false), option("content-type", "application/json", false)],
          body: '{"error":"store_unavailable"}',
        },
      },
    };
    const res = await send(`${envoy.url}/api/products`, { localAddress: newClientAddress() });
    expect(res.status).toBe(503);
    expect(res.json()).toEqual({ error: "unavailable", message: "The authorization service is unavailable" });
    expect(res.header("retry-after")).toBe("1");
  });

  it.each([
    ["a non-OK grpc-status without a message", { error: { code: grpc.status.UNAVAILABLE, details: "x" } }],
    ["an INTERNAL error", { error: { code: grpc.status.INTERNAL, details: "boom" } }],
    ["an answer slower than the 250 ms timeout", { response: OK, delayMs: 1000 }],
  ])("answers status_on_error (503) with the local-reply JSON on %s", async (_what, answer) => {
    checkAnswer = answer as Answer;
    const started = Date.now();
    const res = await send(`${envoy.url}/api/products`, { localAddress: newClientAddress() });
    expect(res.status).toBe(503);
    expect(res.json()).toEqual({ error: "unavailable", message: "The authorization service is unavailable" });
    expect(res.header("retry-after")).toBe("1");
    expect(Date.now() - started).toBeLessThan(900);
    expect(upstream.received).toHaveLength(0);
  });

  it("answers 503 when nothing listens on the gRPC cluster, and lets requests through with failure_mode_allow: true", async () => {
    const dead = await scriptedAuthorization(() => ({ response: OK }));
    await dead.close();
    const closed = await startEnvoyHarness({
      config: "envoy-grpc.yaml",
      clusters: { tollgate_grpc: dead.url, tollgate_public: upstream.url, upstream: upstream.url },
    });
    const open = await startEnvoyHarness({
      yaml: envoyYamlText("envoy-grpc.yaml").replace("failure_mode_allow: false", "failure_mode_allow: true"),
      clusters: { tollgate_grpc: dead.url, tollgate_public: upstream.url, upstream: upstream.url },
    });
    try {
      const res = await send(`${closed.url}/api/products`, { localAddress: newClientAddress() });
      expect(res.status).toBe(503);
      expect(res.json()).toMatchObject({ error: "unavailable" });
      expect(upstream.received).toHaveLength(0);
      const through = await send(`${open.url}/api/products`, {
        headers: { "x-user-id": "forged" },
        localAddress: newClientAddress(),
      });
      expect(through.status).toBe(200);
      expect((upstream.received[0] as Recorded).headers["x-user-id"]).toBeUndefined();
    } finally {
      await Promise.all([closed.close(), open.close()]);
    }
  });

  it("skips the check on /health and /ready and answers 404 JSON off the routes", async () => {
    for (const path of ["/health", "/ready"]) {
      expect((await send(`${envoy.url}${path}`, { localAddress: newClientAddress() })).status).toBe(200);
    }
    const missing = await send(`${envoy.url}/admin/users`, { localAddress: newClientAddress() });
    expect(missing.status).toBe(404);
    expect(missing.json()).toEqual({ error: "not_found", message: "no such endpoint" });
    expect(authz.received).toHaveLength(0);
  });
});
