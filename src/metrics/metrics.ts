// Every Prometheus metric of tollgate, on one registry. Labels stay bounded: never an id, IP or key.
import { Counter, collectDefaultMetrics, Gauge, type LabelValues, Registry } from "prom-client";
import { metricsText } from "../process/workers.js";
import { createLeanHistogram } from "./lean-histogram.js";

export type Metrics = ReturnType<typeof createMetrics>;

type DecisionLabel = "decision" | "reason" | "tier" | "category";

/**
 * The decision counter, counted on the check path in plain numbers (one per label set) and added to
 * the prom-client counter when it is read: prom-client's own inc validates and hashes the labels on
 * every call.
 */
function createDecisionCounter(registry: Registry) {
  const pending: { labels: LabelValues<DecisionLabel>; count: number }[] = [];
  const counter = new Counter({
    name: "tollgate_decisions_total",
    help: "Check decisions by outcome",
    labelNames: ["decision", "reason", "tier", "category"] as const,
    registers: [registry],
    collect() {
      for (const p of pending) {
        if (p.count === 0) continue;
        this.inc(p.labels, p.count);
        p.count = 0;
      }
    },
  });
  // A reset drops what was counted and not yet read, as prom-client's own counter would.
  const reset = counter.reset.bind(counter);
  counter.reset = () => {
    for (const p of pending) p.count = 0;
    reset();
  };
  return {
    counter,
    /** A label set's counter, made once per label set (label values must be bounded). */
    labels(labels: LabelValues<DecisionLabel>): { inc(): void } {
      const entry = { labels, count: 0 };
      pending.push(entry);
      return {
        inc() {
          entry.count += 1;
        },
      };
    },
  };
}

export function createMetrics() {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  return {
    registry,
    /** What GET /metrics serves: this registry, or with WORKERS > 1 the sum over every worker. */
    render: metricsText(registry),
    decisions: createDecisionCounter(registry),
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
    grpcCalls: new Counter({
      name: "tollgate_grpc_calls_total",
      help: "gRPC calls answered, by method and gRPC status (CANCELLED: the client left first)",
      labelNames: ["method", "status"] as const,
      registers: [registry],
    }),
    grpcInFlight: new Gauge({
      name: "tollgate_grpc_calls_in_flight",
      help: "gRPC calls begun and not yet answered (open health watches included), by method",
      labelNames: ["method"] as const,
      registers: [registry],
    }),
    rlsHits: new Counter({
      name: "tollgate_rls_hits_total",
      help: "Rate limit service hits (weighted by hits_addend) per domain, descriptor key path and result: within, near (past 80% of the limit), over, shadow (over a shadow_mode limit, allowed), cached (over, answered from the denial cache)",
      labelNames: ["domain", "key", "result"] as const,
      registers: [registry],
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
