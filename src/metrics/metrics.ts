// Every Prometheus metric of tollgate, on one registry. Labels stay bounded: never an id, IP or key.
import { Counter, collectDefaultMetrics, Gauge, type LabelValues, Registry } from "prom-client";
import { metricsText } from "../process/workers.js";
import { createLeanCounter, createLeanGauge } from "./lean-counter.js";
import { createLeanHistogram } from "./lean-histogram.js";

export type Metrics = ReturnType<typeof createMetrics>;

/**
 * A counter without labels for the check path, counted in a plain number and added to the
 * prom-client counter when it is read (prom-client's own inc validates its arguments every call).
 */
function createPlainCounter(registry: Registry, name: string, help: string): { inc(): void } {
  let pending = 0;
  new Counter({
    name,
    help,
    registers: [registry],
    collect() {
      if (pending === 0) return;
      this.inc(pending);
      pending = 0;
    },
  });
  return {
    inc() {
      pending += 1;
    },
  };
}

/** Set to 1 by each process: the sum that a WORKERS cluster serves counts the workers that answered. */
function createWorkersGauge(registry: Registry): void {
  const gauge = new Gauge({
    name: "tollgate_workers",
    help: "Processes whose figures this scrape sums: 1, or with WORKERS the workers that answered",
    registers: [registry],
  });
  gauge.set(1);
}

/**
 * A counter with each of `values` present at 0 from the start: `increase()` and `rate()` see a first
 * event as an increase only from a series that existed before it (the reload and lockout alerts).
 */
function withZeros<Name extends string>(counter: Counter<Name>, label: Name, values: readonly string[]) {
  for (const value of values) counter.inc({ [label]: value } as LabelValues<Name>, 0);
  return counter;
}

const RELOAD_RESULTS = ["changed", "unchanged", "invalid"];
/** The events the auth service and the admin API count (auth-service.ts AuthEvent, admin-api.ts). */
const AUTH_EVENTS = [
  "login",
  "login_failed",
  "lockout",
  "login_busy",
  "logout",
  "logout_all",
  "session_revoked",
  "session_evicted",
  "admin_revoke",
  "tier_changed",
];

export function createMetrics() {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  createWorkersGauge(registry);
  return {
    registry,
    /** What GET /metrics serves: this registry, or with WORKERS > 1 the sum over every worker. */
    render: metricsText(registry),
    decisions: createLeanCounter({
      name: "tollgate_decisions_total",
      help: "Check decisions by outcome",
      labelNames: ["decision", "reason", "tier", "category"],
      registry,
    }),
    checkDuration: createLeanHistogram({
      name: "tollgate_check_duration_seconds",
      help: "Time to answer a check, by proxy protocol (envoy-rls: a rate limit service call)",
      labelName: "protocol",
      // Bounds at the latency alerts' thresholds (15 ms, 150 ms) and Envoy's default timeouts (the
      // rate limit filter's 20 ms, ext_authz's 200 ms): histogram_quantile is exact at a bound and a
      // linear guess between two, which put a p99 of 11 ms anywhere up to 25 ms, past the 15 ms alert.
      buckets: [
        0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25,
      ],
      registry,
    }),
    denialCacheAnswers: createPlainCounter(
      registry,
      "tollgate_denial_cache_answers_total",
      "Checks refused from the denial cache, without a store call",
    ),
    storeErrors: withZeros(
      new Counter({
        name: "tollgate_store_errors_total",
        help: "Store calls that failed or timed out, by operation",
        labelNames: ["operation"] as const,
        registers: [registry],
      }),
      "operation",
      ["authorize", "hit"],
    ),
    storeUp: new Gauge({
      name: "tollgate_store_up",
      help: "1 while the store answers, 0 while it does not",
      registers: [registry],
    }),
    degraded: new Counter({
      name: "tollgate_degraded_total",
      help: "Checks allowed without the store (FAILURE_MODE=open)",
      registers: [registry],
    }),
    policyInfo: new Gauge({
      name: "tollgate_policy_info",
      help: "1 for the version (a hash of its meaning) of the policy in force",
      labelNames: ["version"] as const,
      registers: [registry],
    }),
    policyReloads: withZeros(
      new Counter({
        name: "tollgate_policy_reloads_total",
        help: "Policy reloads by result: changed, unchanged, or invalid (the old policy stays)",
        labelNames: ["result"] as const,
        registers: [registry],
      }),
      "result",
      RELOAD_RESULTS,
    ),
    grpcCalls: createLeanCounter({
      name: "tollgate_grpc_calls_total",
      help: "gRPC calls answered, by method and gRPC status (CANCELLED: the client left first)",
      labelNames: ["method", "status"],
      registry,
    }),
    grpcInFlight: createLeanGauge({
      name: "tollgate_grpc_calls_in_flight",
      help: "gRPC calls begun and not yet answered (open health watches included), by method",
      labelNames: ["method"],
      registry,
    }),
    rlsHits: createLeanCounter({
      name: "tollgate_rls_hits_total",
      help: "Rate limit service hits (weighted by hits_addend) per domain, descriptor key path and result: within, near (past 80% of the limit), over, shadow (over a shadow_mode limit, allowed), cached (over, answered from the denial cache)",
      labelNames: ["domain", "key", "result"],
      registry,
    }),
    rlsReloads: withZeros(
      new Counter({
        name: "tollgate_rls_config_reloads_total",
        help: "RLS_CONFIG reloads by result: changed, unchanged, or invalid (the configuration in force stays)",
        labelNames: ["result"] as const,
        registers: [registry],
      }),
      "result",
      RELOAD_RESULTS,
    ),
    authEvents: withZeros(
      new Counter({
        name: "tollgate_auth_events_total",
        help: "Authentication events",
        labelNames: ["event"] as const,
        registers: [registry],
      }),
      "event",
      AUTH_EVENTS,
    ),
  };
}
