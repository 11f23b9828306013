// The check observer: what each decision and store event leaves in the metrics and the log.
import { describe, expect, it } from "vitest";
import { decideUser } from "../../src/check/decide.js";
import { plan } from "../../src/check/plan.js";
import { createCheckObserver, decisionLabels } from "../../src/metrics/check-observer.js";
import { createMetrics } from "../../src/metrics/metrics.js";
import { compilePolicy } from "../../src/policy/compile.js";
import { parsePolicy } from "../../src/policy/policy.js";
import { createLogger } from "../../src/process/logger.js";
import { externalSubject } from "../../src/ratelimit/types.js";

const compiled = compilePolicy(
  parsePolicy(
    `
tiers:
  anonymous: { general: 100/1h }
  free: { general: 100/1h }
  gold: { mode: shadow, general: 1/1h }
default: { category: general }
`,
    "test",
  ),
);
const token = (tier: string) => ({ ok: true as const, claims: { sub: "u1", sid: "s1", tier, exp: 2e9 } });
const userPlan = (tier: string) => {
  const p = plan(compiled, { method: "GET", path: "/x", token: token(tier), ip: "192.0.2.1" });
  if (p.kind !== "user") throw new Error("unexpected plan");
  return p;
};
const hit = (allowed: boolean) => ({
  allowed,
  layer: 0,
  window: 0,
  limit: 100,
  windowMs: 3_600_000,
  used: allowed ? 1 : 100,
  remaining: allowed ? 99 : 0,
  resetAtMs: 0,
  retryAfterMs: allowed ? 0 : 1_500,
});
const ok = (tier: string, allowed: boolean) =>
  decideUser(compiled, userPlan(tier), {
    kind: "ok",
    tier,
    hit: hit(allowed),
    ownRule: undefined,
    sessionExpiresAtMs: 2e12,
  });

function setup(level: "info" | "debug" = "info", clock?: () => number) {
  const lines: Record<string, unknown>[] = [];
  const logger = createLogger(level, { write: (text: string) => void lines.push(JSON.parse(text)) });
  const metrics = createMetrics();
  const observer = createCheckObserver({ metrics, logger, failureMode: "open", ...(clock && { clock }) });
  const value = async (name: string, labels: Record<string, string>) => {
    const metric = (await metrics.registry.getMetricsAsJSON()).find((m) => m.name === name);
    const entry = metric?.values.find((v) => Object.entries(labels).every(([k, l]) => v.labels[k] === l));
    return entry?.value ?? 0;
  };
  return { lines, metrics, observer, value };
}

describe("the check observer", () => {
  it("labels decisions with bounded values only", () => {
    expect(decisionLabels(ok("free", true))).toEqual({
      decision: "allow",
      reason: "ok",
      tier: "free",
      category: "general",
    });
    expect(decisionLabels(ok("free", false))).toEqual({
      decision: "deny",
      reason: "rate_limited",
      tier: "free",
      category: "general",
    });
    expect(decisionLabels(ok("gold", false))).toMatchObject({ decision: "allow", reason: "shadow" });
    expect(decisionLabels({ kind: "deny", status: 503 })).toMatchObject({
      reason: "unavailable",
      tier: "unknown",
    });
  });

  it("counts every decision and writes one throttled line per refused subject and category", async () => {
    // One second of the observer's clock for every decision: the wall clock could turn a second between them.
    const { lines, observer, value } = setup("info", () => 1_700_000_000_000);
    for (let i = 0; i < 5; i += 1) observer.decided("envoy", ok("free", true), 0.001, "192.0.2.1");
    for (let i = 0; i < 20; i += 1) observer.decided("nginx", ok("free", false), 0.001, "192.0.2.1");
    observer.decided("envoy", ok("gold", false), 0.001, "192.0.2.1");
    expect(await value("tollgate_decisions_total", { decision: "allow", reason: "ok" })).toBe(5);
    expect(await value("tollgate_decisions_total", { decision: "deny", reason: "rate_limited" })).toBe(20);
    expect(await value("tollgate_decisions_total", { decision: "allow", reason: "shadow" })).toBe(1);
    const denied = lines.filter((l) => l.event === "rate_limited");
    expect(denied).toHaveLength(1);
    expect(denied[0]).toMatchObject({
      subject: "u:u1",
      category: "general",
      tier: "free",
      retryAfterSeconds: 2,
    });
    expect(lines.filter((l) => l.event === "shadow_denied")).toHaveLength(1);
  });

  it("names a provider subject in its log lines by the SHA-256 of its sub, never the sub itself", () => {
    const { lines, observer } = setup();
    const sub = "alice@example.com";
    const identity = { userId: `ext:${sub}`, tier: "free", sessionId: "" };
    const refused = ok("free", false);
    if (refused.kind !== "deny" || refused.status !== 429) throw new Error("expected a 429");
    observer.decided("envoy", { ...refused, identity }, 0.001, "192.0.2.1");
    observer.decided(
      "envoy",
      { kind: "allow", degraded: true, identity, limit: undefined },
      0.001,
      "192.0.2.1",
    );
    observer.decided(
      "envoy",
      {
        kind: "deny",
        status: 401,
        reason: "unknown_tier",
        description: "account tier is not configured",
        tokenSent: true,
        holder: { userId: `ext:${sub}`, tier: "gone" },
      },
      0.001,
      "192.0.2.1",
    );
    const hashed = externalSubject(sub);
    expect(lines.find((l) => l.event === "rate_limited")?.subject).toBe(`u:${hashed}`);
    expect(lines.find((l) => l.event === "degraded")?.userId).toBe(hashed);
    expect(lines.find((l) => l.event === "tier_not_configured")?.subject).toBe(`u:${hashed}`);
    expect(JSON.stringify(lines)).not.toContain("alice");
  });

  it("tracks the store going down and coming back, logging each change once", async () => {
    let now = 1_000_000;
    const { lines, observer, value } = setup("info", () => now);
    expect(await value("tollgate_store_up", {})).toBe(1);
    for (let i = 0; i < 3; i += 1) observer.storeFailed("authorize", new Error("timeout"));
    expect(await value("tollgate_store_up", {})).toBe(0);
    expect(await value("tollgate_store_errors_total", { operation: "authorize" })).toBe(3);
    now += 2_000;
    observer.storeAnswered();
    observer.storeAnswered();
    expect(await value("tollgate_store_up", {})).toBe(1);
    expect(lines.filter((l) => l.event === "store_down")).toHaveLength(1);
    expect(lines.filter((l) => l.event === "store_recovered")).toEqual([
      expect.objectContaining({ downMs: 2_000, failures: 3 }),
    ]);
    for (let i = 0; i < 10; i += 1) observer.connectionFailed(new Error("ECONNREFUSED"));
    expect(lines.filter((l) => l.event === "store_connection_error")).toHaveLength(1);
  });

  it("counts in tollgate_degraded_total the checks allowed without the store, not the failed calls", async () => {
    const { observer, value } = setup();
    // Under FAILURE_MODE=open a failed call may still end in a 503 (a login route, an API key) or a
    // 401, or in no check at all (the rate limit service): only a degraded allow lets a request by.
    for (let i = 0; i < 4; i += 1) observer.storeFailed("hit", new Error("timeout"));
    observer.decided("envoy", { kind: "deny", status: 503 }, 0.1, "192.0.2.1");
    observer.decided(
      "envoy",
      { kind: "allow", degraded: true, identity: undefined, limit: undefined },
      0.1,
      "192.0.2.1",
    );
    expect(await value("tollgate_store_errors_total", { operation: "hit" })).toBe(4);
    expect(await value("tollgate_degraded_total", {})).toBe(1);
    expect(await value("tollgate_decisions_total", { reason: "degraded" })).toBe(1);
  });

  it("logs a store that fails and answers in turn as one outage, recovered once it answered for a second", async () => {
    let now = 1_000_000;
    const { lines, observer, value } = setup("info", () => now);
    // Latency around REDIS_TIMEOUT_MS: every other check misses the deadline, for two seconds.
    for (let i = 0; i < 200; i += 1) {
      observer.storeFailed("authorize", new Error("the store did not answer within 100 ms"));
      now += 5;
      observer.storeAnswered();
      now += 5;
    }
    // The gauge follows every call; the log does not.
    expect(await value("tollgate_store_up", {})).toBe(1);
    expect(lines.filter((l) => l.event === "store_down")).toHaveLength(1);
    expect(lines.filter((l) => l.event === "store_recovered")).toHaveLength(0);
    // 999 ms after the last failure, then 1,000.
    now += 989;
    observer.storeAnswered();
    expect(lines.filter((l) => l.event === "store_recovered")).toHaveLength(0);
    now += 1;
    observer.storeAnswered();
    expect(lines.filter((l) => l.event === "store_recovered")).toEqual([
      expect.objectContaining({ failures: 200 }),
    ]);
    // The next failure starts another outage.
    observer.storeFailed("hit", new Error("timeout"));
    expect(lines.filter((l) => l.event === "store_down")).toHaveLength(2);
  });

  it("writes the proxy's request id on the lines of the check it belongs to", () => {
    const { lines, observer } = setup();
    observer.decided("envoy", ok("free", false), 0.001, "192.0.2.1", "req-denied");
    observer.decided(
      "envoy",
      { kind: "allow", degraded: true, identity: undefined, limit: undefined },
      0.001,
      "192.0.2.1",
      "req-degraded",
    );
    observer.storeFailed("hit", new Error("timeout"), "req-store");
    expect(lines.find((l) => l.event === "rate_limited")?.requestId).toBe("req-denied");
    expect(lines.find((l) => l.event === "degraded")?.requestId).toBe("req-degraded");
    expect(lines.find((l) => l.event === "store_down")?.requestId).toBe("req-store");
    // At info, an allowed check writes nothing.
    observer.decided("envoy", ok("free", true), 0.001, "192.0.2.1", "req-quiet");
    expect(lines.filter((l) => l.requestId === "req-quiet")).toEqual([]);
  });

  it("writes one debug line per check at LOG_LEVEL=debug: the decision's labels, never a token or an address", () => {
    const { lines, observer } = setup("debug");
    observer.decided("nginx", ok("free", true), 0.0012345, "192.0.2.1", "req-1");
    observer.decided("envoy-grpc", { kind: "deny", status: 503 }, 0.002, "192.0.2.1", undefined);
    const checks = lines.filter((l) => l.event === "check");
    expect(checks).toHaveLength(2);
    expect(checks[0]).toMatchObject({
      level: "debug",
      requestId: "req-1",
      protocol: "nginx",
      decision: "allow",
      reason: "ok",
      tier: "free",
      category: "general",
      status: 200,
      ms: 1.235,
    });
    expect(checks[1]).toMatchObject({ protocol: "envoy-grpc", decision: "deny", status: 503 });
    expect(checks[1]).not.toHaveProperty("requestId");
    expect(JSON.stringify(checks)).not.toContain("192.0.2.1");
  });
});
