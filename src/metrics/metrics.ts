// Every Prometheus metric of tollgate, on one registry. Labels stay bounded: never an id, IP or key.
import { Counter, collectDefaultMetrics, Gauge, Registry } from "prom-client";
import { metricsText } from "../process/workers.js";
import { createLeanCounter, createLeanGauge } from "./lean-counter.js";
import { createLeanHistogram } from "./lean-histogram.js";

export type Metrics = ReturnType<typeof createMetrics>;

export function createMetrics() {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
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
      help: "Time to answer a check, by proxy protocol",
      labelName: "protocol",
      buckets: [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25],
      registry,
    }),
    storeErrors: new Counter({
      name: "tollgate_store_errors_total",
      help: "Store calls that failed or timed out, by operation",
      labelNames: ["operation"] as const,
      registers: [registry],
    }),
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
    policyReloads: new Counter({
      name: "tollgate_policy_reloads_total",
      help: "Policy reloads by result: changed, unchanged, or invalid (the old policy stays)",
      labelNames: ["result"] as const,
      registers: [registry],
    }),
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
    rlsReloads: new Counter({
      name: "tollgate_rls_config_reloads_total",
      help: "RLS_CONFIG reloads by result: changed, unchanged, or invalid (the configuration in force stays)",
      labelNames: ["result"] as const,
      registers: [registry],
    }),
    authEvents: new Counter({
      name: "tollgate_auth_events_total",
      help: "Authentication events",
      labelNames: ["event"] as const,
      registers: [registry],
    }),
  };
}
