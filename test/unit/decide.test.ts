// The pure decision core and its rendering for Envoy and nginx.
import { describe, expect, it } from "vitest";
import type { TokenCheck } from "../../src/auth/jwt.js";
import {
  compilePolicy,
  type Decision,
  decideAnonymous,
  decideDegraded,
  decideUser,
  plan,
} from "../../src/authz/decide.js";
import { loadPolicy } from "../../src/config/policy.js";
import { renderDecision, renderForNginx } from "../../src/http/check-responses.js";
import type { HitResult } from "../../src/ratelimit/types.js";

const compiled = compilePolicy(loadPolicy(undefined));
const valid: TokenCheck = { ok: true, claims: { sub: "u1", sid: "s1", tier: "pro", exp: 2e9 } };
const expired: TokenCheck = { ok: false, reason: "expired", description: "token expired" };
const NOW = 1_700_000_000_000;
const hit = (allowed: boolean, used: number, limit: number, retryAfterMs = 0): HitResult => ({
  allowed,
  limit,
  used,
  remaining: Math.max(0, limit - used),
  resetAtMs: NOW + 3_600_000,
  retryAfterMs,
});

describe("planning a check", () => {
  it("allows unlimited routes without asking the store", () => {
    const p = plan(compiled, { method: "GET", path: "/health", token: undefined, ip: "192.0.2.1" });
    expect(p).toEqual({
      kind: "done",
      decision: { kind: "allow", identity: undefined, limit: undefined, degraded: false },
    });
  });

  it("sends a valid token on a guarded route to the user's window with every tier's limit", () => {
    const p = plan(compiled, { method: "GET", path: "/api/search?q=x", token: valid, ip: "192.0.2.1" });
    expect(p).toMatchObject({ kind: "user", userId: "u1", sessionId: "s1", category: "search" });
    if (p.kind !== "user") throw new Error("expected a user plan");
    expect(Object.fromEntries(p.limits)).toEqual({
      free: { limit: 20, windowMs: 3_600_000 },
      pro: { limit: 200, windowMs: 3_600_000 },
      enterprise: { limit: 2000, windowMs: 3_600_000 },
    });
  });

  it("counts requests without a valid token against the client's address", () => {
    for (const token of [undefined, expired]) {
      const p = plan(compiled, { method: "POST", path: "/api/orders", token, ip: "192.0.2.1" });
      expect(p).toMatchObject({
        kind: "anonymous",
        subject: "ip:192.0.2.1",
        category: "orders",
        rule: { limit: 10, windowMs: 3_600_000 },
        tokenRequired: true,
      });
    }
  });

  it("treats login as anonymous even with a valid token", () => {
    const p = plan(compiled, { method: "POST", path: "/auth/login", token: valid, ip: "192.0.2.9" });
    expect(p).toMatchObject({ kind: "anonymous", category: "login", tokenRequired: false });
  });
});

describe("deciding", () => {
  const anon = plan(compiled, { method: "GET", path: "/api/products", token: expired, ip: "192.0.2.1" });
  const user = plan(compiled, { method: "GET", path: "/api/products", token: valid, ip: "192.0.2.1" });
  if (anon.kind !== "anonymous" || user.kind !== "user") throw new Error("unexpected plans");

  it("denies a bad token 401 once the anonymous window had room, and 429 once it had none", () => {
    expect(decideAnonymous(anon, hit(true, 1, 100))).toMatchObject({
      status: 401,
      reason: "expired",
      tokenSent: true,
    });
    expect(decideAnonymous(anon, hit(false, 100, 100, 5_000))).toMatchObject({ status: 429 });
  });

  it("maps the store's answers for a user", () => {
    expect(decideUser(user, { kind: "no_session" })).toMatchObject({ status: 401, reason: "revoked" });
    expect(decideUser(user, { kind: "user_inactive" })).toMatchObject({ status: 401, reason: "inactive" });
    expect(decideUser(user, { kind: "ok", tier: "pro", hit: hit(true, 1, 1000) })).toMatchObject({
      kind: "allow",
      identity: { userId: "u1", tier: "pro", sessionId: "s1" },
      limit: { tier: "pro", category: "general", limit: 1000, remaining: 999, windowMs: 3_600_000 },
    });
    expect(decideUser(user, { kind: "ok", tier: "free", hit: hit(false, 100, 100, 1) })).toMatchObject({
      status: 429,
      limit: { tier: "free" },
    });
  });

  it("degrades per FAILURE_MODE: open trusts a valid token's claims, closed answers 503", () => {
    expect(decideDegraded(user, "open")).toEqual({
      kind: "allow",
      identity: { userId: "u1", tier: "pro", sessionId: "s1" },
      limit: undefined,
      degraded: true,
    });
    expect(decideDegraded(anon, "open")).toMatchObject({ status: 401 });
    expect(decideDegraded(user, "closed")).toEqual({ kind: "deny", status: 503 });
  });
});

describe("rendering", () => {
  const limit = { ...hit(false, 20, 20, 1_500), tier: "free", category: "search", windowMs: 3_600_000 };
  const denied: Decision = { kind: "deny", status: 429, limit, identity: undefined };

  it("answers Envoy's 429 with limit headers, Retry-After rounded up and the JSON body", () => {
    const r = renderDecision(denied, NOW);
    expect(r.status).toBe(429);
    expect(r.headers).toMatchObject({
      "retry-after": "2",
      "x-ratelimit-limit": "20",
      "x-ratelimit-remaining": "0",
      "x-ratelimit-used": "20",
      "x-ratelimit-reset": String((NOW + 3_600_000) / 1000),
      "x-ratelimit-resource": "search",
      "ratelimit-policy": '"free-search";q=20;w=3600',
      ratelimit: '"free-search";r=0;t=3600',
    });
    expect(JSON.parse(r.body)).toMatchObject({
      error: "rate_limit_exceeded",
      retry_after_seconds: 2,
      category: "search",
      tier: "free",
      limit: 20,
      window_seconds: 3600,
    });
  });

  it("renders each rule's own 429 although its constant parts are prepared once per rule", () => {
    const body = (l: number, w: number, retry: number, tier: string, category: string) =>
      JSON.stringify({
        error: "rate_limit_exceeded",
        message: `Rate limit exceeded: ${l} ${category} requests per ${w} seconds for tier ${tier}. Retry in ${retry} seconds.`,
        retry_after_seconds: retry,
        category,
        tier,
        limit: l,
        window_seconds: w,
      });
    const deny = (
      l: number,
      windowMs: number,
      retryMs: number,
      tier = "free",
      category = "search",
    ): Decision => ({
      kind: "deny",
      status: 429,
      limit: { ...hit(false, l, l, retryMs), tier, category, windowMs },
      identity: undefined,
    });
    expect(renderDecision(deny(20, 3_600_000, 1_500), NOW).body).toBe(body(20, 3600, 2, "free", "search"));
    expect(renderDecision(deny(20, 3_600_000, 59_001), NOW).body).toBe(body(20, 3600, 60, "free", "search"));
    // The same tier and category with another limit and window (a changed policy) is a new rule.
    const changed = renderDecision(deny(5, 60_000, 10_000), NOW);
    expect(changed.body).toBe(body(5, 60, 10, "free", "search"));
    expect(changed.headers).toMatchObject({
      "x-ratelimit-limit": "5",
      "x-ratelimit-used": "5",
      "ratelimit-policy": '"free-search";q=5;w=60',
      "retry-after": "10",
    });
    expect(renderDecision(deny(7, 60_000, 1_000, "pro", "orders"), NOW).body).toBe(
      body(7, 60, 1, "pro", "orders"),
    );
    // nginx's copy of the headers never changes what the next Envoy answer carries.
    renderForNginx(deny(20, 3_600_000, 1_500), NOW);
    expect(renderDecision(deny(20, 3_600_000, 1_500), NOW).headers["x-authz-status"]).toBeUndefined();
  });

  it("always sets the identity headers on allow, empty for anonymous requests", () => {
    const r = renderDecision({ kind: "allow", identity: undefined, limit: undefined, degraded: true }, NOW);
    expect(r).toEqual({
      status: 200,
      headers: { "x-user-id": "", "x-user-tier": "", "x-session-id": "", "x-ratelimit-degraded": "true" },
      body: "",
    });
  });

  it("challenges without an error attribute when no token was sent", () => {
    const none = renderDecision(
      { kind: "deny", status: 401, reason: "missing", description: "x", tokenSent: false },
      NOW,
    );
    expect(none.headers["www-authenticate"]).toBe('Bearer realm="tollgate"');
    const bad = renderDecision(
      { kind: "deny", status: 401, reason: "expired", description: "token expired", tokenSent: true },
      NOW,
    );
    expect(bad.headers["www-authenticate"]).toBe(
      'Bearer realm="tollgate", error="invalid_token", error_description="token expired"',
    );
  });

  it("turns a 429 into 403 + X-Authz-Status for nginx, keeping the headers and body", () => {
    const r = renderForNginx(denied, NOW);
    expect(r.status).toBe(403);
    expect(r.headers["x-authz-status"]).toBe("429");
    expect(r.headers["retry-after"]).toBe("2");
    expect(r.body).toBe("");
    expect(JSON.parse(r.headers["x-authz-body"] as string)).toEqual(
      JSON.parse(renderDecision(denied, NOW).body),
    );
    expect(renderForNginx({ kind: "deny", status: 503 }, NOW)).toMatchObject({
      status: 403,
      headers: { "x-authz-status": "503" },
    });
  });
});
