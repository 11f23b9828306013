// The pure decision core and its rendering for Envoy and nginx.
import { describe, expect, it } from "vitest";
import type { TokenCheck } from "../../src/auth/jwt.js";
import { decideAnonymous, decideDegraded, decideUser } from "../../src/check/decide.js";
import { plan } from "../../src/check/plan.js";
import type { UserAnswer as AuthorizeResult } from "../../src/check/types.js";
import { forNginx, renderForNginx } from "../../src/frontends/nginx.js";
import { renderDecision } from "../../src/frontends/render.js";
import { type CompiledPolicy, compilePolicy } from "../../src/policy/compile.js";
import { DEFAULT_POLICY_YAML, loadPolicy, parsePolicy } from "../../src/policy/policy.js";
import type { HitResult } from "../../src/ratelimit/types.js";

const compiled = compilePolicy(loadPolicy(undefined));
const valid: TokenCheck = { ok: true, claims: { sub: "u1", sid: "s1", tier: "pro", exp: 2e9 } };
const expired: TokenCheck = { ok: false, reason: "expired", description: "token expired" };
const NOW = 1_700_000_000_000;
const hit = (allowed: boolean, used: number, limit: number, retryAfterMs = 0, layer = 0): HitResult => ({
  allowed,
  layer,
  window: 0,
  limit,
  windowMs: 3_600_000,
  used,
  remaining: Math.max(0, limit - used),
  resetAtMs: NOW + 3_600_000,
  retryAfterMs,
});
const ok = (tier: string, h: HitResult): AuthorizeResult => ({
  kind: "ok",
  tier,
  hit: h,
  ownRule: undefined,
  sessionExpiresAtMs: NOW + 86_400_000,
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
    const one = (limit: number) => ({ algorithm: "sliding-log", windows: [{ limit, windowMs: 3_600_000 }] });
    expect(Object.fromEntries(p.rules)).toEqual({ free: one(20), pro: one(200), enterprise: one(2000) });
    expect(p.ip).toBeUndefined();
  });

  it("counts requests without a valid token against the client's address", () => {
    for (const token of [undefined, expired]) {
      const p = plan(compiled, { method: "POST", path: "/api/orders", token, ip: "192.0.2.1" });
      expect(p).toMatchObject({
        kind: "anonymous",
        subject: "ip:192.0.2.1",
        category: "orders",
        layers: [
          {
            category: "orders",
            rule: { algorithm: "sliding-log", windows: [{ limit: 10, windowMs: 3_600_000 }] },
          },
        ],
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
    expect(decideUser(compiled, user, { kind: "no_session" })).toMatchObject({
      status: 401,
      reason: "revoked",
    });
    expect(decideUser(compiled, user, { kind: "user_inactive" })).toMatchObject({
      status: 401,
      reason: "inactive",
    });
    expect(decideUser(compiled, user, ok("pro", hit(true, 1, 1000)))).toMatchObject({
      kind: "allow",
      identity: { userId: "u1", tier: "pro", sessionId: "s1" },
      limit: { tier: "pro", category: "general", limit: 1000, remaining: 999, windowMs: 3_600_000 },
    });
    expect(decideUser(compiled, user, ok("free", hit(false, 100, 100, 1)))).toMatchObject({
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

  it("never passes an API key unchecked while the store is down, and trusts a provider token's tier as a login token's", () => {
    const key: TokenCheck = {
      ok: true,
      claims: {
        sub: "key:0123456789abcdef",
        sid: "",
        tier: "",
        exp: Number.POSITIVE_INFINITY,
        external: { kind: "key", subject: "k:0123456789abcdef", hash: "h" },
      },
    };
    const keyPlan = plan(compiled, { method: "GET", path: "/api/products", token: key, ip: "192.0.2.1" });
    expect(keyPlan).toMatchObject({
      kind: "user",
      subject: "k:0123456789abcdef",
      proof: { kind: "key", hash: "h" },
    });
    expect(decideDegraded(keyPlan, "open")).toEqual({ kind: "deny", status: 503 });
    const provider: TokenCheck = {
      ok: true,
      claims: {
        sub: "auth0|x",
        sid: "",
        tier: "platinum",
        exp: 2e9,
        external: { kind: "provider", subject: "x:abc" },
      },
    };
    const providerPlan = plan(compiled, {
      method: "GET",
      path: "/api/products",
      token: provider,
      ip: "192.0.2.1",
      externalDefaultTier: "free",
    });
    // A tier the policy lacks: EXTERNAL_DEFAULT_TIER, in the store's proof and when degraded alike.
    expect(providerPlan).toMatchObject({
      kind: "user",
      subject: "x:abc",
      claimTier: "free",
      proof: { kind: "subject", tier: "free" },
    });
    expect(decideDegraded(providerPlan, "open")).toMatchObject({
      kind: "allow",
      identity: { userId: "auth0|x", tier: "free", sessionId: "" },
      degraded: true,
    });
  });

  it("answers 503 in either mode to a limited route that takes no token, as its limit cannot be counted", () => {
    const login = plan(compiled, { method: "POST", path: "/auth/login", token: undefined, ip: "192.0.2.1" });
    expect(login).toMatchObject({ kind: "anonymous", category: "login", tokenRequired: false });
    expect(decideDegraded(login, "open")).toEqual({ kind: "deny", status: 503 });
    expect(decideDegraded(login, "closed")).toEqual({ kind: "deny", status: 503 });
    // Unlimited routes never ask the store, so they never degrade.
    expect(
      plan(compiled, { method: "GET", path: "/health", token: undefined, ip: "192.0.2.1" }),
    ).toMatchObject({
      kind: "done",
      decision: { kind: "allow" },
    });
  });
});

describe("rendering", () => {
  const searcher = plan(compiled, { method: "GET", path: "/api/search", token: valid, ip: "192.0.2.1" });
  if (searcher.kind !== "user") throw new Error("unexpected plan");
  const denied = decideUser(compiled, searcher, ok("free", hit(false, 20, 20, 1_500)));

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
    const policyOf = (yaml: string) => compilePolicy(parsePolicy(yaml, "test"));
    const deny = (
      c: CompiledPolicy,
      tier: string,
      path: string,
      l: number,
      windowMs: number,
      retryMs: number,
    ) => {
      const p = plan(c, {
        method: path === "/api/orders" ? "POST" : "GET",
        path,
        token: valid,
        ip: "192.0.2.1",
      });
      if (p.kind !== "user") throw new Error("unexpected plan");
      return decideUser(c, p, ok(tier, { ...hit(false, l, l, retryMs), windowMs }));
    };
    expect(renderDecision(deny(compiled, "free", "/api/search", 20, 3_600_000, 1_500), NOW).body).toBe(
      body(20, 3600, 2, "free", "search"),
    );
    expect(renderDecision(deny(compiled, "free", "/api/search", 20, 3_600_000, 59_001), NOW).body).toBe(
      body(20, 3600, 60, "free", "search"),
    );
    // The same tier and category under another policy (a reload) is a new rule.
    const reloaded = policyOf(
      DEFAULT_POLICY_YAML.replace(/(free: +\{ general: 100\/1h, +)search: 20\/1h/, "$1search: 5/1m"),
    );
    const changed = renderDecision(deny(reloaded, "free", "/api/search", 5, 60_000, 10_000), NOW);
    expect(changed.body).toBe(body(5, 60, 10, "free", "search"));
    expect(changed.headers).toMatchObject({
      "x-ratelimit-limit": "5",
      "x-ratelimit-used": "5",
      "ratelimit-policy": '"free-search";q=5;w=60',
      "retry-after": "10",
    });
    expect(renderDecision(deny(compiled, "pro", "/api/orders", 100, 3_600_000, 1_000), NOW).body).toBe(
      body(100, 3600, 1, "pro", "orders"),
    );
    // nginx's copy of the headers never changes what the next Envoy answer carries.
    renderForNginx(deny(compiled, "free", "/api/search", 20, 3_600_000, 1_500), NOW);
    expect(
      renderDecision(deny(compiled, "free", "/api/search", 20, 3_600_000, 1_500), NOW).headers[
        "x-authz-status"
      ],
    ).toBeUndefined();
  });

  describe("with layers and lists of windows", () => {
    const layered = compilePolicy(
      parsePolicy(
        `
ip: [20/1s, 600/1m]
tiers:
  anonymous: { general: 100/1h, login: 10/15m }
  free: { general: [5/1s, 100/1h] }
default: { category: general }
`,
        "test",
      ),
    );
    const p = plan(layered, {
      method: "GET",
      path: "/api/products",
      token: { ...valid, claims: { ...valid.claims, tier: "free" } },
      ip: "192.0.2.7",
    });
    if (p.kind !== "user") throw new Error("unexpected plan");

    it("plans the IP layer with the user's windows", () => {
      expect(p.ip).toEqual({
        subject: "ip:192.0.2.7",
        rule: {
          algorithm: "sliding-log",
          windows: [
            { limit: 20, windowMs: 1_000 },
            { limit: 600, windowMs: 60_000 },
          ],
        },
        shadow: false,
      });
    });

    it("lists every window in RateLimit-Policy and names the described one in RateLimit", () => {
      const described: HitResult = {
        ...hit(true, 3, 5),
        layer: 1,
        window: 0,
        windowMs: 1_000,
        resetAtMs: NOW + 1_000,
      };
      const r = renderDecision(decideUser(layered, p, ok("free", described)), NOW);
      expect(r.headers).toMatchObject({
        "x-ratelimit-limit": "5",
        "x-ratelimit-remaining": "2",
        "x-ratelimit-resource": "general",
        "ratelimit-policy":
          '"ip";q=20;w=1, "ip-1m";q=600;w=60, "free-general";q=5;w=1, "free-general-1h";q=100;w=3600',
        ratelimit: '"free-general";r=2;t=1',
      });
    });

    it("refuses with category ip before identity when the IP layer is full", () => {
      const full: HitResult = { ...hit(false, 600, 600, 30_000), layer: 0, window: 1, windowMs: 60_000 };
      const d = decideUser(layered, p, { kind: "ip_denied", hit: full });
      expect(d).toMatchObject({
        kind: "deny",
        status: 429,
        identity: undefined,
        limit: { category: "ip", tier: "free" },
      });
      const r = renderDecision(d, NOW);
      expect(r.headers).toMatchObject({
        "x-ratelimit-resource": "ip",
        ratelimit: '"ip-1m";r=0;t=3600',
        "retry-after": "30",
      });
      expect(JSON.parse(r.body)).toMatchObject({
        message: "Rate limit exceeded: 600 requests per 60 seconds from this address. Retry in 30 seconds.",
        category: "ip",
        limit: 600,
        window_seconds: 60,
      });
    });
  });

  it("lets an over-limit request through in shadow mode, marked", () => {
    const shadowed = compilePolicy(
      parsePolicy(DEFAULT_POLICY_YAML.replace("  free:       {", "  free:       { mode: shadow,"), "test"),
    );
    const p = plan(shadowed, { method: "GET", path: "/api/search", token: valid, ip: "192.0.2.1" });
    if (p.kind !== "user") throw new Error("unexpected plan");
    const d = decideUser(shadowed, p, ok("free", hit(false, 20, 20, 1_500)));
    expect(d).toMatchObject({ kind: "allow", limit: { shadow: true } });
    expect(renderDecision(d, NOW).headers).toMatchObject({
      "x-ratelimit-remaining": "0",
      "x-ratelimit-shadow": "deny",
    });
    // Other tiers stay enforced.
    expect(decideUser(shadowed, p, ok("pro", hit(false, 200, 200, 1_500)))).toMatchObject({ status: 429 });
  });

  describe("with the IP layer in shadow mode", () => {
    const shadowIp = compilePolicy(parsePolicy(`mode: shadow\nip: 600/1m\n${DEFAULT_POLICY_YAML}`, "test"));
    const p = plan(shadowIp, { method: "GET", path: "/api/search", token: valid, ip: "192.0.2.1" });
    if (p.kind !== "user") throw new Error("unexpected plan");
    const ipFull: HitResult = { ...hit(false, 600, 600, 1_500), layer: 0 };

    it("plans the IP layer as one that refuses nothing, for users and anonymous requests", () => {
      expect(p.ip).toMatchObject({ subject: "ip:192.0.2.1", shadow: true });
      const anon = plan(shadowIp, { method: "POST", path: "/auth/login", token: undefined, ip: "192.0.2.1" });
      expect(anon).toMatchObject({ kind: "anonymous", layers: [{ shadow: true }, { shadow: true }] });
    });

    it("passes a checked session over the IP layer with its identity, marked", () => {
      expect(decideUser(shadowIp, p, ok("free", ipFull))).toMatchObject({
        kind: "allow",
        identity: { userId: "u1", tier: "free", sessionId: "s1" },
        limit: { category: "ip", shadow: true },
      });
    });

    it("never passes an IP refusal made before the session was looked at", () => {
      // A refusal cached under enforce mode, decided after a reload to shadow mode.
      expect(decideUser(shadowIp, p, { kind: "ip_denied", hit: ipFull })).toMatchObject({
        kind: "deny",
        status: 429,
        identity: undefined,
        limit: { category: "ip", shadow: false },
      });
    });
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

  it("reshapes an answer for nginx into a new one, leaving the answer it was given as it was", () => {
    const envoy = renderDecision(denied, NOW);
    const before = structuredClone(envoy);
    const reshaped = forNginx(envoy);
    expect(envoy).toEqual(before);
    expect(reshaped.headers).not.toBe(envoy.headers);
    expect(reshaped).toMatchObject({ status: 403, body: "", headers: { "x-authz-status": "429" } });
  });
});
