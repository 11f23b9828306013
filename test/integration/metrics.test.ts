// /metrics after a known mix of checks and auth events: exact counts, bounded labels, METRICS_TOKEN.
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { policyFromDocument } from "../../src/policy/policy.js";
import { createMemoryStore, createRedisStore } from "../../src/store/store.js";
import { type InProcess, type OnStoreOptions, startInProcess } from "../support/in-process.js";
import { parsePrometheus, type Sample, sampleValue, series } from "../support/prometheus.js";
import { connectRedis, testPrefix } from "../support/redis.js";
import { ADMIN_TOKEN, METRICS_TOKEN } from "../support/secrets.mjs";

const CHECK_IP = "198.51.100.23";
const LOGIN_IP = "203.0.113.9";
const FRESH_PASSWORD = "fresh-user-password-42";

// The built-in policy, with small limits where the test needs a denial (the lockout is LOGIN_LOCKOUT).
const POLICY = policyFromDocument(
  {
    tiers: {
      anonymous: { general: "100/1h", search: "20/1h", orders: "10/1h", login: "3/15m" },
      free: { general: "100/1h", search: "3/1h", orders: "10/1h" },
      pro: { general: "1000/1h", search: "200/1h", orders: "100/1h" },
      enterprise: { general: "10000/1h", search: "2000/1h", orders: "1000/1h" },
    },
    routes: [
      { method: "GET", path: "/api/products", category: "general" },
      { method: "GET", path: "/api/search", category: "search" },
      { method: "POST", path: "/api/orders", category: "orders" },
      { method: "POST", path: "/auth/login", category: "login", token: "none" },
      { path: "/health", token: "none", limit: false },
      { path: "/ready", token: "none", limit: false },
    ],
    default: { category: "general", token: "required" },
  },
  "metrics test policy",
);

let redis: Redis;
const instances: InProcess[] = [];

type Urls = { check: string; public: string; admin: string };

async function start(options: OnStoreOptions): Promise<Urls> {
  const instance = await startInProcess(options);
  instances.push(instance);
  return { check: instance.checkUrl, public: instance.publicUrl, admin: instance.adminUrl };
}

let urls: Urls;
let guarded: Urls;

beforeAll(async () => {
  redis = connectRedis();
  urls = await start({
    // A generous store deadline: a slow CI machine must not turn an exact count into "degraded".
    store: createRedisStore({ redis, prefix: testPrefix(), timeoutMs: 2000 }),
    policy: POLICY,
    env: {
      LOG_LEVEL: "silent",
      REDIS_TIMEOUT_MS: "2000",
      MAX_SESSIONS_PER_USER: "2",
      LOGIN_LOCKOUT: "3/15m",
    },
  });
  guarded = await start({
    store: createMemoryStore(),
    policy: POLICY,
    demoUsers: false,
    env: { LOG_LEVEL: "silent", METRICS_TOKEN },
  });
});

afterAll(async () => {
  await Promise.all(instances.map((instance) => instance.close()));
  redis.disconnect();
});

const json = { "content-type": "application/json" };
const bearer = (token: string) => ({ authorization: `Bearer ${token}` });
const admin = bearer(ADMIN_TOKEN);

type LoginBody = { access_token: string; session_id: string; user_id: string; tier: string };

async function loginAs(username: string, password: string): Promise<{ status: number; body: LoginBody }> {
  const res = await fetch(`${urls.public}/auth/login`, {
    method: "POST",
    headers: { ...json, "x-forwarded-for": LOGIN_IP },
    body: JSON.stringify({ username, password }),
  });
  return { status: res.status, body: (await res.json()) as LoginBody };
}

async function loggedIn(username: string, password = "secret"): Promise<LoginBody> {
  const { status, body } = await loginAs(username, password);
  expect(status).toBe(200);
  return body;
}

async function envoy(path: string, token?: string): Promise<Response> {
  const headers: Record<string, string> = { "x-forwarded-for": CHECK_IP };
  if (token !== undefined) headers.authorization = `Bearer ${token}`;
  const res = await fetch(`${urls.check}/ext_authz${path}`, { headers });
  await res.arrayBuffer();
  return res;
}

async function nginx(uri: string, token?: string): Promise<Response> {
  const headers: Record<string, string> = {
    "x-original-method": "GET",
    "x-original-uri": uri,
    "x-forwarded-for": CHECK_IP,
  };
  if (token !== undefined) headers.authorization = `Bearer ${token}`;
  const res = await fetch(`${urls.check}/nginx/auth`, { headers });
  await res.arrayBuffer();
  return res;
}

async function statuses(times: number, send: () => Promise<Response>): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < times; i += 1) out.push((await send()).status);
  return out;
}

async function post(url: string, headers: Record<string, string>, body?: unknown): Promise<number> {
  const res = await fetch(url, {
    method: "POST",
    headers: body === undefined ? headers : { ...headers, ...json },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  await res.arrayBuffer();
  return res.status;
}

describe("/metrics after a known mix of requests", () => {
  let samples: Sample[];
  let text: string;
  const secrets: string[] = [];

  beforeAll(async () => {
    const freshName = `metrics_${Date.now()}`;
    const created = await fetch(`${urls.admin}/admin/users`, {
      method: "POST",
      headers: { ...admin, ...json },
      body: JSON.stringify({ username: freshName, password: FRESH_PASSWORD, tier: "free" }),
    });
    expect(created.status).toBe(201);
    const fresh = (await created.json()) as { user_id: string };

    // Five logins; the third of bob_pro evicts his first session (MAX_SESSIONS_PER_USER=2).
    const alice = await loggedIn("alice");
    const bob1 = await loggedIn("bob_pro");
    const bob2 = await loggedIn("bob_pro");
    const bob3 = await loggedIn("bob_pro");
    const free = await loggedIn(freshName, FRESH_PASSWORD);
    for (const s of [alice, bob1, bob2, bob3, free]) secrets.push(s.access_token, s.session_id, s.user_id);
    secrets.push(freshName);

    // Four failed logins, then a lockout of the name that failed three times (LOGIN_LOCKOUT=3/15m).
    expect((await loginAs("alice", "not-her-password")).status).toBe(401);
    for (let i = 0; i < 3; i += 1) expect((await loginAs("ghost_user", "guess")).status).toBe(401);
    expect((await loginAs("ghost_user", "guess")).status).toBe(429);

    // Checks, part 1.
    expect(await statuses(3, () => envoy("/api/products", alice.access_token))).toEqual([200, 200, 200]);
    expect(await statuses(2, () => nginx("/api/products?limit=5", bob3.access_token))).toEqual([200, 200]);
    expect(await statuses(4, () => envoy("/api/search?q=a", free.access_token))).toEqual([
      200, 200, 200, 429,
    ]);
    const nginxDenied = await nginx("/api/search?q=b", free.access_token);
    expect([nginxDenied.status, nginxDenied.headers.get("x-authz-status")]).toEqual([403, "429"]);
    expect((await nginx("/api/search", free.access_token)).status).toBe(403);
    expect(await statuses(2, () => envoy("/api/products"))).toEqual([401, 401]);
    expect((await envoy("/api/products", "not-a-jwt")).status).toBe(401);
    expect((await nginx("/api/products", "not-a-jwt")).status).toBe(401);
    expect((await envoy("/api/products", bob1.access_token)).status).toBe(401);
    expect((await nginx("/health")).status).toBe(200);

    // Session revoked by its user, a logout and a tier change; then checks, part 2.
    const revoke = `${urls.public}/auth/sessions/${bob2.session_id}/revoke`;
    expect(await post(revoke, bearer(bob3.access_token))).toBe(200);
    expect(await post(`${urls.public}/auth/logout`, bearer(alice.access_token))).toBe(200);
    const tier = await fetch(`${urls.admin}/admin/users/${fresh.user_id}/tier`, {
      method: "PUT",
      headers: { ...admin, ...json },
      body: JSON.stringify({ tier: "pro" }),
    });
    expect(tier.status).toBe(200);
    expect((await envoy("/api/search", free.access_token)).status).toBe(200);
    expect((await envoy("/api/products", bob2.access_token)).status).toBe(401);

    // Logout from every device, an admin revoke; then checks, part 3.
    expect(await post(`${urls.public}/auth/logout-all`, bearer(free.access_token))).toBe(200);
    expect(await post(`${urls.admin}/admin/users/${bob3.user_id}/revoke`, admin)).toBe(200);
    expect((await envoy("/api/products", alice.access_token)).status).toBe(401);
    expect((await nginx("/api/products", bob3.access_token)).status).toBe(401);
    expect((await envoy("/api/search", free.access_token)).status).toBe(401);

    const res = await fetch(`${urls.admin}/metrics`);
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toMatch(/^text\/plain; version=0\.0\.4/);
    text = await res.text();
    samples = parsePrometheus(text);
  });

  it("counts every decision by decision, reason, tier and category", () => {
    expect(series(samples, "tollgate_decisions_total", ["decision", "reason", "tier", "category"])).toEqual({
      "allow|ok|free|general": 3,
      "allow|ok|pro|general": 2,
      "allow|ok|free|search": 3,
      "deny|rate_limited|free|search": 3,
      "deny|unauthenticated|anonymous|none": 9,
      "allow|ok|anonymous|none": 1,
      "allow|ok|pro|search": 1,
    });
  });

  it("times every check, by protocol", () => {
    expect(series(samples, "tollgate_check_duration_seconds_count", ["protocol"])).toEqual({
      envoy: 15,
      nginx: 7,
    });
    expect(
      sampleValue(samples, "tollgate_check_duration_seconds_bucket", { protocol: "envoy", le: "+Inf" }),
    ).toBe(15);
    const les = samples
      .filter((s) => s.name === "tollgate_check_duration_seconds_bucket" && s.labels.protocol === "nginx")
      .map((s) => s.labels.le);
    expect(les).toEqual([
      "0.0001",
      "0.00025",
      "0.0005",
      "0.001",
      "0.0025",
      "0.005",
      "0.01",
      "0.015",
      "0.02",
      "0.025",
      "0.05",
      "0.1",
      "0.15",
      "0.2",
      "0.25",
      "+Inf",
    ]);
  });

  it("counts the refusals the denial cache answered: the 429s after the store's first", () => {
    expect(sampleValue(samples, "tollgate_denial_cache_answers_total")).toBe(2);
  });

  it("counts one process as one worker", () => {
    expect(sampleValue(samples, "tollgate_workers")).toBe(1);
  });

  it("counts each auth event once per occurrence", () => {
    expect(series(samples, "tollgate_auth_events_total", ["event"])).toEqual({
      login: 5,
      session_evicted: 1,
      login_failed: 4,
      // Exported at 0 from the start, as every event: a flood's first 503 is then a rate.
      login_busy: 0,
      lockout: 1,
      session_revoked: 1,
      logout: 1,
      tier_changed: 1,
      logout_all: 1,
      admin_revoke: 1,
    });
  });

  it("reports the store up, with no store error and no degraded check", () => {
    expect(sampleValue(samples, "tollgate_store_up")).toBe(1);
    expect(sampleValue(samples, "tollgate_degraded_total")).toBe(0);
    // Both operations are there from the start, at 0 (rate() then sees a first failure).
    expect(series(samples, "tollgate_store_errors_total", ["operation"])).toEqual({ authorize: 0, hit: 0 });
  });

  it("includes the default process and Node.js metrics", () => {
    expect(sampleValue(samples, "process_cpu_user_seconds_total")).toBeGreaterThan(0);
    expect(sampleValue(samples, "nodejs_eventloop_lag_seconds")).toBeGreaterThanOrEqual(0);
    expect(sampleValue(samples, "process_resident_memory_bytes")).toBeGreaterThan(0);
  });

  it("never uses a user id, session id, username, token or IP as a label value", () => {
    const bounded: Record<string, readonly string[]> = {
      decision: ["allow", "deny"],
      reason: ["ok", "rate_limited", "unauthenticated", "degraded", "unavailable", "shadow", "bad_request"],
      tier: ["anonymous", "free", "pro", "enterprise", "unknown"],
      category: ["general", "search", "orders", "login", "account", "ip", "none"],
      result: ["changed", "unchanged", "invalid"],
      operation: ["authorize", "hit"],
      protocol: ["envoy", "nginx"],
      event: ["login", "login_failed", "logout", "logout_all", "session_revoked", "session_evicted"].concat([
        "admin_revoke",
        "tier_changed",
        "lockout",
        "login_busy",
      ]),
    };
    for (const sample of samples.filter((s) => s.name.startsWith("tollgate_"))) {
      for (const [label, value] of Object.entries(sample.labels)) {
        if (label === "le") expect(value).toMatch(/^(\d+(\.\d+)?|\+Inf)$/);
        // The policy's version: a hash of the policy, one label value at a time.
        else if (label === "version") expect(value).toMatch(/^[0-9a-f]{12}$/);
        else expect(bounded[label], `${sample.name} ${label}="${value}"`).toContain(value);
      }
    }
    expect(secrets).toHaveLength(16);
    const leaked = [
      ...secrets,
      CHECK_IP,
      LOGIN_IP,
      "127.0.0.1",
      "demo-alice",
      "demo-bob",
      "ghost_user",
    ].filter((s) => text.includes(s));
    expect(leaked).toEqual([]);
  });
});

describe("/metrics with METRICS_TOKEN set", () => {
  it("answers 401 without a bearer token", async () => {
    const res = await fetch(`${guarded.admin}/metrics`);
    expect(res.status).toBe(401);
    expect(res.headers.get("www-authenticate")).toBe('Bearer realm="tollgate"');
    expect(await res.json()).toEqual({
      error: "unauthorized",
      message: "A valid metrics bearer token is required",
    });
  });

  it("answers 401 to a wrong bearer token, the admin token included", async () => {
    for (const wrong of [`${METRICS_TOKEN}x`, ADMIN_TOKEN]) {
      const res = await fetch(`${guarded.admin}/metrics`, { headers: bearer(wrong) });
      expect(res.status).toBe(401);
      expect(((await res.json()) as { error: string }).error).toBe("unauthorized");
    }
  });

  it("answers 200 with the metrics to the right bearer token", async () => {
    const res = await fetch(`${guarded.admin}/metrics`, { headers: bearer(METRICS_TOKEN) });
    expect(res.status).toBe(200);
    expect(sampleValue(parsePrometheus(await res.text()), "tollgate_store_up")).toBe(1);
  });

  it("still needs no token for /metrics when METRICS_TOKEN is unset", async () => {
    const res = await fetch(`${urls.admin}/metrics`, { headers: bearer("anything-at-all") });
    expect(res.status).toBe(200);
    await res.arrayBuffer();
  });
});
