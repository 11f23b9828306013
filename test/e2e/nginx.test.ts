// End to end through a real nginx (auth_request) with real tollgate, upstream and Redis processes.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { login } from "../support/http-client.mjs";
import {
  type Nginx,
  startNginx,
  startTollgate,
  startUpstream,
  type TollgateProcess,
  type UpstreamProcess,
} from "../support/processes.mjs";
import { rawRequest } from "../support/raw-http.js";
import { type RecordingServer, recordingServer } from "../support/recording-server.js";
import { redisUrl, testPrefix } from "../support/redis.js";

let tollgate: TollgateProcess;
let second: TollgateProcess;
let upstream: UpstreamProcess;
let nginx: Nginx;
let nginxSecond: Nginx;

beforeAll(async () => {
  // A generous store deadline: on a loaded 2-core test machine a 100 ms deadline can expire while
  // the CPU is busy, and a degraded (fail-open) allow would blur the exact counts this file proves.
  // The deadline itself is tested in test/integration/check-path.test.ts and test/e2e/operations.test.ts.
  const env = {
    REDIS_URL: redisUrl(),
    REDIS_KEY_PREFIX: testPrefix(),
    LOG_LEVEL: "warn",
    REDIS_TIMEOUT_MS: "2000",
  };
  [tollgate, second, upstream] = await Promise.all([startTollgate(env), startTollgate(env), startUpstream()]);
  [nginx, nginxSecond] = await Promise.all([
    startNginx({ checkPort: tollgate.checkPort, publicPort: tollgate.port, upstreamPort: upstream.port }),
    startNginx({ checkPort: second.checkPort, publicPort: second.port, upstreamPort: upstream.port }),
  ]);
});

afterAll(async () => {
  await Promise.all([nginx?.stop(), nginxSecond?.stop()]);
  await Promise.all([tollgate?.stop(), second?.stop(), upstream?.stop()]);
});

const bearer = (token: string) => ({ authorization: `Bearer ${token}` });

let userCounter = 0;
/** A fresh free user (created through the admin API) and a token for it, logged in directly. */
async function freshUser(tier = "free"): Promise<{ token: string; userId: string }> {
  userCounter += 1;
  const username = `nginx_${tier}_${userCounter}_${Date.now()}`;
  const res = await fetch(`${tollgate.adminUrl}/admin/users`, {
    method: "POST",
    headers: { ...bearer(tollgate.adminToken), "content-type": "application/json" },
    body: JSON.stringify({ username, password: "long-enough-password", tier }),
  });
  expect(res.status).toBe(201);
  const session = await login(tollgate.url, username, "long-enough-password");
  return { token: session.access_token, userId: session.user_id };
}

describe("through nginx", () => {
  it("walks the README flow: login, /me, products with limit headers, sessions, logout, 401", async () => {
    const res = await fetch(`${nginx.url}/auth/login`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-device-name": "laptop" },
      body: JSON.stringify({ username: "alice", password: "secret" }),
    });
    expect(res.status).toBe(200);
    expect(res.headers.get("x-ratelimit-resource")).toBe("login");
    const session = (await res.json()) as {
      access_token: string;
      session_id: string;
      user_id: string;
      tier: string;
    };
    expect(session.tier).toBe("free");

    const me = await fetch(`${nginx.url}/me`, { headers: bearer(session.access_token) });
    expect(me.status).toBe(200);
    expect(await me.json()).toMatchObject({ username: "alice", tier: "free", device: "laptop" });

    const products = await fetch(`${nginx.url}/api/products`, { headers: bearer(session.access_token) });
    expect(products.status).toBe(200);
    expect(products.headers.get("x-ratelimit-limit")).toBe("100");
    expect(products.headers.get("x-ratelimit-resource")).toBe("general");
    expect(Number(products.headers.get("x-ratelimit-remaining"))).toBeLessThan(100);
    expect(Number(products.headers.get("x-ratelimit-reset"))).toBeGreaterThan(Date.now() / 1000);
    expect(products.headers.get("ratelimit-policy")).toBe('"free-general";q=100;w=3600');
    expect(products.headers.get("ratelimit")).toMatch(/^"free-general";r=\d+;t=\d+$/);
    expect(((await products.json()) as { user: { id: string } }).user.id).toBe(session.user_id);

    const sessions = await fetch(`${nginx.url}/auth/sessions`, { headers: bearer(session.access_token) });
    const listed = (await sessions.json()) as { sessions: { session_id: string; is_current: boolean }[] };
    expect(listed.sessions.find((s) => s.is_current)?.session_id).toBe(session.session_id);

    const logout = await fetch(`${nginx.url}/auth/logout`, {
      method: "POST",
      headers: bearer(session.access_token),
    });
    expect(logout.status).toBe(200);
    expect(await logout.json()).toEqual({ message: "Logged out from this device" });

    const after = await fetch(`${nginx.url}/api/products`, { headers: bearer(session.access_token) });
    expect(after.status).toBe(401);
    expect(after.headers.get("content-type")).toMatch(/application\/json/);
    expect(after.headers.get("www-authenticate")).toMatch(/^Bearer realm="tollgate", error="invalid_token"/);
    expect(await after.json()).toMatchObject({ error: "unauthorized" });
  });

  it("answers 401 with a JSON body and a plain challenge when no token is sent", async () => {
    const res = await fetch(`${nginx.url}/api/products`);
    expect(res.status).toBe(401);
    expect(res.headers.get("www-authenticate")).toBe('Bearer realm="tollgate"');
    expect(await res.json()).toEqual({ error: "unauthorized", message: "Authentication required" });
  });

  it("shows each tier its own limit", async () => {
    const expected = { alice: "100", bob_pro: "1000", ent_carol: "10000" };
    for (const [username, limit] of Object.entries(expected)) {
      const { access_token } = await login(tollgate.url, username);
      const res = await fetch(`${nginx.url}/api/products`, { headers: bearer(access_token) });
      expect(res.status, username).toBe(200);
      expect(res.headers.get("x-ratelimit-limit"), username).toBe(limit);
    }
  });

  it("limits search and orders as their own categories", async () => {
    const { token } = await freshUser();
    const search = await fetch(`${nginx.url}/api/search?q=lamp`, { headers: bearer(token) });
    expect(search.status).toBe(200);
    expect(search.headers.get("x-ratelimit-limit")).toBe("20");
    expect(search.headers.get("x-ratelimit-resource")).toBe("search");
    const order = await fetch(`${nginx.url}/api/orders`, {
      method: "POST",
      headers: { ...bearer(token), "content-type": "application/json" },
      body: JSON.stringify({ items: [{ product_id: 1, quantity: 2 }] }),
    });
    expect(order.status).toBe(201);
    expect(order.headers.get("x-ratelimit-limit")).toBe("10");
    expect(order.headers.get("x-ratelimit-remaining")).toBe("9");
  });

  it("passes 100 sequential requests, then answers 429 with Retry-After and the JSON body", async () => {
    const { token } = await freshUser();
    const statuses: number[] = [];
    let last: Response | undefined;
    for (let i = 0; i < 105; i += 1) {
      last = await fetch(`${nginx.url}/api/products`, { headers: bearer(token) });
      statuses.push(last.status);
      if (i < 104) await last.arrayBuffer();
    }
    expect(statuses.slice(0, 100).every((s) => s === 200)).toBe(true);
    expect(statuses.slice(100)).toEqual([429, 429, 429, 429, 429]);
    const denied = last as Response;
    expect(denied.headers.get("content-type")).toMatch(/application\/json/);
    const retryAfter = Number(denied.headers.get("retry-after"));
    expect(retryAfter).toBeGreaterThan(3500);
    expect(retryAfter).toBeLessThanOrEqual(3600);
    expect(denied.headers.get("x-ratelimit-remaining")).toBe("0");
    expect(denied.headers.get("x-ratelimit-limit")).toBe("100");
    expect(await denied.json()).toMatchObject({
      error: "rate_limit_exceeded",
      retry_after_seconds: retryAfter,
      category: "general",
      tier: "free",
      limit: 100,
      window_seconds: 3600,
    });
  });

  it("lets exactly 100 of 500 concurrent requests through", async () => {
    const { token } = await freshUser();
    const statuses = await Promise.all(
      Array.from({ length: 500 }, async () => {
        const res = await fetch(`${nginx.url}/api/products`, { headers: bearer(token) });
        await res.arrayBuffer();
        return res.status;
      }),
    );
    const counts: Record<number, number> = {};
    for (const s of statuses) counts[s] = (counts[s] ?? 0) + 1;
    if (counts[503]) console.log(nginx.errorLog().slice(-3000));
    expect(counts).toEqual({ 200: 100, 429: 400 });
  });

  it("lets exactly 100 through two tollgate processes that share one Redis", async () => {
    const { token } = await freshUser();
    const statuses = await Promise.all(
      Array.from({ length: 300 }, async (_, i) => {
        const res = await fetch(`${(i % 2 === 0 ? nginx : nginxSecond).url}/api/products`, {
          headers: bearer(token),
        });
        await res.arrayBuffer();
        return res.status;
      }),
    );
    const counts: Record<number, number> = {};
    for (const s of statuses) counts[s] = (counts[s] ?? 0) + 1;
    expect(counts).toEqual({ 200: 100, 429: 200 });
  });

  it("never lets a client's identity headers reach the upstream", async () => {
    const { token, userId } = await freshUser();
    const res = await fetch(`${nginx.url}/api/products`, {
      headers: {
        ...bearer(token),
        "x-user-id": "forged-admin",
        "x-user-tier": "enterprise",
        "x-session-id": "x",
      },
    });
    expect(res.status).toBe(200);
    expect(((await res.json()) as { user: { id: string; tier: string } }).user).toEqual({
      id: userId,
      tier: "free",
    });
  });

  it("keys anonymous logins by the address nginx saw, whatever X-Forwarded-For claims", async () => {
    // The walk-through above used one of the 10 logins per 15 minutes of 127.0.0.1.
    const statuses: number[] = [];
    for (let i = 0; i < 12; i += 1) {
      const res = await fetch(`${nginxSecond.url}/auth/login`, {
        method: "POST",
        headers: { "content-type": "application/json", "x-forwarded-for": `198.51.100.${i}` },
        body: JSON.stringify({ username: "nobody", password: "wrong" }),
      });
      statuses.push(res.status);
      await res.arrayBuffer();
    }
    expect(statuses.filter((s) => s === 429).length).toBeGreaterThanOrEqual(3);
    expect(statuses.slice(-1)).toEqual([429]);
  });
});

describe("nginx itself, against recording check, public API and upstream servers", () => {
  let check: RecordingServer;
  let publicApi: RecordingServer;
  let app: RecordingServer;
  let proxy: Nginx;

  beforeAll(async () => {
    const ok = () => ({ status: 200, headers: { "content-type": "application/json" }, body: "{}" });
    // Room for any header nginx passes: what reaches each server is then the test's to judge.
    const roomy = { maxHeaderBytes: 1024 * 1024 };
    [check, publicApi, app] = await Promise.all([
      recordingServer(ok, roomy),
      recordingServer(ok, roomy),
      recordingServer(ok, roomy),
    ]);
    proxy = await startNginx({ checkPort: check.port, publicPort: publicApi.port, upstreamPort: app.port });
  });

  afterAll(async () => {
    await proxy?.stop();
    await Promise.all([check?.close(), publicApi?.close(), app?.close()]);
  });

  it("never forwards a client's X-Tollgate-Client-Ip: not to the check, the public API or the upstream", async () => {
    const paths = ["/api/products?x=1", "/auth/login", "/me", "/health", "/ready"];
    for (const path of paths) {
      // Two copies in two spellings, as separate header lines: nginx must drop every one of them.
      const res = await rawRequest(
        proxy.url,
        `GET ${path} HTTP/1.1\r\nHost: localhost\r\nX-Tollgate-Client-Ip: 203.0.113.77\r\n` +
          "x-tollgate-client-ip: 198.51.100.7\r\nConnection: close\r\n\r\n",
      );
      expect(res.status, path).toBe(200);
    }
    // /health and /ready skip the check; the three checked routes each asked once.
    expect(check.received.map((r) => r.headers["x-original-uri"])).toEqual([
      "/api/products?x=1",
      "/auth/login",
      "/me",
    ]);
    const forwarded = [...publicApi.received, ...app.received];
    expect(forwarded.map((r) => r.url).sort()).toEqual([...paths].sort());
    for (const request of [...check.received, ...forwarded]) {
      expect(request.headers["x-tollgate-client-ip"], request.url).toBeUndefined();
    }
  });

  it("never forwards a method override: the upstream serves the method the check was charged for", async () => {
    const before = app.received.length;
    // Rack, Symfony, Laravel and express's method-override would serve this POST by the GET route.
    const res = await rawRequest(
      proxy.url,
      "POST /api/search HTTP/1.1\r\nHost: localhost\r\nX-HTTP-Method-Override: GET\r\n" +
        "x-http-method-override: GET\r\nX-HTTP-Method: GET\r\nX-Method-Override: GET\r\n" +
        "Content-Length: 0\r\nConnection: close\r\n\r\n",
    );
    expect(res.status).toBe(200);
    const [forwarded] = app.received.slice(before);
    expect(forwarded?.method).toBe("POST");
    for (const name of ["x-http-method-override", "x-http-method", "x-method-override"])
      expect(forwarded?.headers[name], name).toBeUndefined();
  });

  it("never forwards a header that names another path: the upstream routes by the one checked", async () => {
    const before = app.received.length;
    // Laminas/Zend and old Symfony route by X-Original-URL or X-Rewrite-URL when present.
    const res = await rawRequest(
      proxy.url,
      "GET /api/products HTTP/1.1\r\nHost: localhost\r\nX-Original-URL: /api/search\r\n" +
        "x-original-url: /api/search\r\nX-Rewrite-URL: /api/search\r\nConnection: close\r\n\r\n",
    );
    expect(res.status).toBe(200);
    const [forwarded] = app.received.slice(before);
    expect(forwarded?.url).toBe("/api/products");
    for (const name of ["x-original-url", "x-rewrite-url"])
      expect(forwarded?.headers[name], name).toBeUndefined();
  });

  // The check reads a handful of headers: a client's others (cookies, anything) are none of its business.
  it("sends the check only what it reads, never a client's other headers", async () => {
    const before = check.received.length;
    const junk = "x".repeat(20_000);
    const res = await rawRequest(
      proxy.url,
      `GET /api/products HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer abc.def.ghi\r\n` +
        `X-Junk-One: ${junk}\r\nX-Junk-Two: ${junk}\r\nCookie: a=1\r\nConnection: close\r\n\r\n`,
    );
    expect(res.status).toBe(200);
    const asked = check.received.slice(before);
    expect(asked).toHaveLength(1);
    const names = Object.keys(asked[0]?.headers ?? {}).sort();
    expect(names).toEqual([
      "authorization",
      "host",
      "x-forwarded-for",
      "x-original-method",
      "x-original-uri",
      "x-request-id",
    ]);
    expect(asked[0]?.headers.authorization).toBe("Bearer abc.def.ghi");
    // The upstream still gets the request's own headers.
    expect(app.received.at(-1)?.headers["x-junk-one"]).toBe(junk);
  });

  it("gives the check and the upstream one request id, nginx's own, and the check the caller's trace", async () => {
    const before = { check: check.received.length, app: app.received.length };
    const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    const res = await rawRequest(
      proxy.url,
      `GET /api/products HTTP/1.1\r\nHost: localhost\r\nX-Request-Id: chosen-by-the-client\r\n` +
        `traceparent: ${traceparent}\r\ntracestate: vendor=1\r\nConnection: close\r\n\r\n`,
    );
    expect(res.status).toBe(200);
    const [asked] = check.received.slice(before.check);
    const [forwarded] = app.received.slice(before.app);
    const id = asked?.headers["x-request-id"];
    // $request_id: 16 random bytes in hex, never the client's.
    expect(id).toMatch(/^[0-9a-f]{32}$/);
    expect(forwarded?.headers["x-request-id"]).toBe(id);
    expect(asked?.headers.traceparent).toBe(traceparent);
    expect(asked?.headers.tracestate).toBe("vendor=1");
    expect(forwarded?.headers.traceparent).toBe(traceparent);
  });
});

describe("what nginx forwards of an API key, against recording check and upstream servers", () => {
  let check: RecordingServer;
  let app: RecordingServer;
  let dropping: Nginx;
  let forwarding: Nginx;

  beforeAll(async () => {
    const ok = () => ({ status: 200, headers: { "content-type": "application/json" }, body: "{}" });
    [check, app] = await Promise.all([recordingServer(ok), recordingServer(ok)]);
    const ports = { checkPort: check.port, publicPort: app.port, upstreamPort: app.port };
    [dropping, forwarding] = await Promise.all([
      startNginx(ports),
      startNginx({ ...ports, apiKeyForward: true }),
    ]);
  });

  afterAll(async () => {
    await Promise.all([dropping?.stop(), forwarding?.stop()]);
    await Promise.all([check?.close(), app?.close()]);
  });

  // Each client request as raw header lines: two copies of the key header must both be dropped.
  const cases: [string, string | undefined, string | undefined][] = [
    ["X-API-Key: tg_one\r\n", "tg_one", undefined],
    ["X-API-Key: tg_one\r\nx-api-key: tg_two\r\n", "tg_one, tg_two", undefined],
    ["Authorization: ApiKey tg_one\r\n", undefined, "ApiKey tg_one"],
    ["Authorization: APIKEY tg_one\r\n", undefined, "APIKEY tg_one"],
    ["Authorization: Basic dTpw\r\nX-API-Key: tg_one\r\n", "tg_one", "Basic dTpw"],
    ["Authorization: Bearer a.b.c\r\n", undefined, "Bearer a.b.c"],
    // The scheme then a tab, which tollgate reads as its scheme (malformed): a key all the same.
    ["Authorization: ApiKey\ttg_one\r\nX-API-Key: tg_two\r\n", "tg_two", "ApiKey\ttg_one"],
  ];

  it("gives the check the key but drops it before the upstream, as the key header and as ApiKey", async () => {
    for (const [lines, key, authorization] of cases) {
      const before = { check: check.received.length, app: app.received.length };
      const res = await rawRequest(
        dropping.url,
        `GET /api/products HTTP/1.1\r\nHost: localhost\r\n${lines}Connection: close\r\n\r\n`,
      );
      expect(res.status, lines).toBe(200);
      const [asked] = check.received.slice(before.check);
      const [forwarded] = app.received.slice(before.app);
      // nginx joins repeated headers for the check's $http_x_api_key only since 1.23; either way the check saw one.
      expect(asked?.headers["x-api-key"] === undefined, lines).toBe(key === undefined);
      expect(asked?.headers.authorization, lines).toBe(authorization);
      expect(forwarded?.headers["x-api-key"], lines).toBeUndefined();
      const kept = /^apikey[ \t]/i.test(authorization ?? "") ? undefined : authorization;
      expect(forwarded?.headers.authorization, lines).toBe(kept);
    }
  });

  it("forwards both as sent when rendered with API_KEY_FORWARD=true", async () => {
    for (const [lines, key, authorization] of cases) {
      const before = app.received.length;
      const res = await rawRequest(
        forwarding.url,
        `GET /api/products HTTP/1.1\r\nHost: localhost\r\n${lines}Connection: close\r\n\r\n`,
      );
      expect(res.status, lines).toBe(200);
      const [forwarded] = app.received.slice(before);
      // Every copy, as before the key was dropped (node:http joins them with ", ").
      expect(forwarded?.headers["x-api-key"], lines).toBe(key);
      expect(forwarded?.headers.authorization, lines).toBe(authorization);
    }
  });
});

describe("API keys through nginx", () => {
  it("passes X-API-Key to the check: allowed with the key's tier, refused once it is revoked", async () => {
    const admin = { ...bearer(tollgate.adminToken), "content-type": "application/json" };
    const made = await fetch(`${tollgate.adminUrl}/admin/api-keys`, {
      method: "POST",
      headers: admin,
      body: JSON.stringify({ name: "through nginx", tier: "pro" }),
    });
    expect(made.status).toBe(201);
    const { id, key } = (await made.json()) as { id: string; key: string };
    const allowed = await fetch(`${nginx.url}/api/products`, { headers: { "x-api-key": key } });
    expect(allowed.status).toBe(200);
    expect(allowed.headers.get("x-ratelimit-limit")).toBe("1000");
    const viaScheme = await fetch(`${nginxSecond.url}/api/products`, {
      headers: { authorization: `ApiKey ${key}` },
    });
    expect(viaScheme.status).toBe(200);
    await fetch(`${tollgate.adminUrl}/admin/api-keys/${id}`, { method: "DELETE", headers: admin });
    for (const proxy of [nginx, nginxSecond]) {
      const refused = await fetch(`${proxy.url}/api/products`, { headers: { "x-api-key": key } });
      expect(refused.status).toBe(401);
    }
  });
});

describe("another API_KEY_HEADER through nginx", () => {
  let custom: TollgateProcess;
  let proxy: Nginx;
  beforeAll(async () => {
    custom = await startTollgate({
      REDIS_URL: redisUrl(),
      REDIS_KEY_PREFIX: testPrefix(),
      LOG_LEVEL: "warn",
      REDIS_TIMEOUT_MS: "2000",
      API_KEY_HEADER: "X-Client-Key",
    });
    proxy = await startNginx({
      checkPort: custom.checkPort,
      publicPort: custom.port,
      upstreamPort: upstream.port,
      apiKeyHeader: "X-Client-Key",
    });
  });
  afterAll(async () => {
    await proxy?.stop();
    await custom?.stop();
  });

  it("passes the header render.mjs was given to the check, as tollgate reads it", async () => {
    const made = await fetch(`${custom.adminUrl}/admin/api-keys`, {
      method: "POST",
      headers: { ...bearer(custom.adminToken), "content-type": "application/json" },
      body: JSON.stringify({ name: "another header", tier: "pro" }),
    });
    const { key } = (await made.json()) as { key: string };
    const allowed = await fetch(`${proxy.url}/api/products`, { headers: { "x-client-key": key } });
    expect(allowed.status).toBe(200);
    expect(allowed.headers.get("x-ratelimit-limit")).toBe("1000");
    // The default header is no key of this tollgate's: the request is anonymous, refused by a token route.
    const old = await fetch(`${proxy.url}/api/products`, { headers: { "x-api-key": key } });
    expect(old.status).toBe(401);
  });
});
