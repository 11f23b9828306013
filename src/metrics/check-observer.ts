// What every check and store event leaves behind: metric counts (label children resolved once per
// label set), the store's up/down state, and throttled log lines.

import type { Decision } from "../check/types.js";
import type { Logger } from "../process/logger.js";
import { createThrottledLog } from "../process/throttled-log.js";
import { externalSubject, ipSubject, PROVIDER_PREFIX, userSubject } from "../ratelimit/types.js";
import type { Metrics } from "./metrics.js";

export type CheckObserver = {
  /**
   * One answered check: the front end's protocol label, the decision, time taken, client address
   * and the proxy's request id (every log line of the check carries it). The label is a constant of
   * the front end that answered ("envoy", "nginx"), so it stays bounded.
   */
  decided(protocol: string, decision: Decision, seconds: number, ip: string, requestId?: string): void;
  /** A store call of a check or of the rate limit service failed or missed its deadline. */
  storeFailed(operation: "authorize" | "hit", error: unknown, requestId?: string): void;
  /** A store call of a check or of the rate limit service succeeded: the store is up again. */
  storeAnswered(): void;
  /** The store's connection failed (ioredis's "error", a cluster's "node error"). */
  connectionFailed(error: Error): void;
};

type Labels = { decision: string; reason: string; tier: string; category: string };

/** A decision's metric labels: bounded values only (never an id, address or key). */
export function decisionLabels(decision: Decision): Labels {
  if (decision.kind === "allow") {
    return {
      decision: "allow",
      reason: decision.degraded ? "degraded" : decision.limit?.shadow === true ? "shadow" : "ok",
      tier: decision.identity?.tier || decision.limit?.tier || "anonymous",
      category: decision.limit?.category ?? "none",
    };
  }
  switch (decision.status) {
    case 401:
      return { decision: "deny", reason: "unauthenticated", tier: "anonymous", category: "none" };
    case 429:
      return {
        decision: "deny",
        reason: "rate_limited",
        tier: decision.limit.tier,
        category: decision.limit.category,
      };
    case 503:
      return { decision: "deny", reason: "unavailable", tier: "unknown", category: "none" };
    case 400:
      return { decision: "deny", reason: "bad_request", tier: "unknown", category: "none" };
  }
}

/**
 * A user id as log lines give it: a provider subject's `sub` (often a person's address) as the
 * store keeps it, `x:` and its SHA-256, never as sent; tollgate's users and API keys as they are.
 */
const loggedUser = (userId: string): string =>
  userId.startsWith(PROVIDER_PREFIX) ? externalSubject(userId.slice(PROVIDER_PREFIX.length)) : userId;
const loggedSubject = (userId: string): string => userSubject(loggedUser(userId));

/**
 * How long the store must answer without a failure before store_recovered is logged: a Redis whose
 * latency hovers around REDIS_TIMEOUT_MS fails and answers checks in turn, and logging every change
 * would write two lines per failure (measured: 114 lines in 10 s at ten checks in flight).
 */
const RECOVERED_AFTER_MS = 1_000;

export function createCheckObserver(options: {
  metrics: Metrics;
  logger: Logger;
  failureMode: "open" | "closed";
  /** The clock of every line it throttles and of the store outage it logs (Date.now). */
  clock?: () => number;
}): CheckObserver {
  const { metrics, logger, failureMode } = options;
  const clock = options.clock ?? Date.now;
  // Read once: LOG_LEVEL does not change while tollgate runs, and most checks write no line at all.
  const everyCheck = logger.isLevelEnabled("debug");
  let storeUp = true;
  metrics.storeUp.set(1);
  /** The outage the log is in (from its store_down on), until the store has answered for a while. */
  let outage: { since: number; lastFailure: number; failures: number } | undefined;

  const durations = new Map<string, ReturnType<typeof metrics.checkDuration.labels>>();
  const durationChild = (protocol: string) => {
    let child = durations.get(protocol);
    if (child === undefined) {
      child = metrics.checkDuration.labels(protocol);
      durations.set(protocol, child);
    }
    return child;
  };
  type DecisionChild = ReturnType<typeof metrics.decisions.labels>;
  // Per status (200 for an allow), reason, tier and category: found without building a key per check.
  const decisionChildren = new Map<number, Map<string, Map<string, Map<string, DecisionChild>>>>();
  const decisionChild = (decision: Decision): DecisionChild => {
    const labels = decisionLabels(decision);
    const status = decision.kind === "allow" ? 200 : decision.status;
    const byReason =
      decisionChildren.get(status) ?? new Map<string, Map<string, Map<string, DecisionChild>>>();
    const byTier = byReason.get(labels.reason) ?? new Map<string, Map<string, DecisionChild>>();
    const byCategory = byTier.get(labels.tier) ?? new Map<string, DecisionChild>();
    let child = byCategory.get(labels.category);
    if (child === undefined) {
      child = metrics.decisions.labels(labels);
      byCategory.set(labels.category, child);
      byTier.set(labels.tier, byCategory);
      byReason.set(labels.reason, byTier);
      decisionChildren.set(status, byReason);
    }
    return child;
  };

  /** LOG_LEVEL=debug: one line per check, the decision as the metrics label it (no token, no path). */
  const logCheck = (protocol: string, decision: Decision, seconds: number, requestId: string | undefined) => {
    const { decision: outcome, reason, tier, category } = decisionLabels(decision);
    logger.debug(
      {
        event: "check",
        requestId,
        protocol,
        decision: outcome,
        reason,
        tier,
        category,
        status: decision.kind === "allow" ? 200 : decision.status,
        ms: Math.round(seconds * 1e6) / 1e3,
      },
      "check answered",
    );
  };

  // ioredis prints each failed (re)connect to stderr as plain text when nobody listens for "error".
  const logConnectionError = createThrottledLog({
    logger,
    level: "warn",
    event: "store_connection_error",
    clock,
    message: "cannot reach the store",
  });
  const logDenial = createThrottledLog({
    logger,
    level: "info",
    event: "rate_limited",
    clock,
    message: "request denied: rate limit exceeded",
  });
  const logShadow = createThrottledLog({
    logger,
    level: "info",
    event: "shadow_denied",
    clock,
    message: "request over a shadow-mode limit allowed (it would have been denied)",
  });
  // A tier a reload removed while users, keys or subjects still hold it: their every check is 401,
  // which the metrics count as any bad credential's. One line per tier a minute says why.
  const logUnknownTier = createThrottledLog({
    logger,
    level: "warn",
    event: "tier_not_configured",
    clock,
    message: "refused: the identity's stored tier is not in the policy (move it, or restore the tier)",
    periodMs: 60_000,
  });
  const logDegraded = createThrottledLog({
    logger,
    level: "warn",
    event: "degraded",
    clock,
    message: "request allowed without the store (FAILURE_MODE=open)",
  });

  return {
    decided(protocol, decision, seconds, ip, requestId) {
      durationChild(protocol).observe(seconds);
      decisionChild(decision).inc();
      if (everyCheck) logCheck(protocol, decision, seconds, requestId);
      const over =
        decision.kind === "deny" && decision.status === 429
          ? { log: logDenial, limit: decision.limit, identity: decision.identity }
          : decision.kind === "allow" && decision.limit?.shadow === true
            ? { log: logShadow, limit: decision.limit, identity: decision.identity }
            : undefined;
      if (over !== undefined) {
        // A level LOG_LEVEL leaves out costs no subject, key or clock read per refusal.
        if (!over.log.enabled) return;
        const { limit, identity } = over;
        // The key is the subject as tollgate holds it (never written); the line's hashes a provider's
        // sub, and is built only for the one line per subject and second that is written.
        const subject = identity === undefined ? ipSubject(ip) : userSubject(identity.userId);
        over.log(`${subject}|${limit.category}`, () => ({
          requestId,
          subject: identity === undefined ? subject : loggedSubject(identity.userId),
          category: limit.category,
          tier: limit.tier,
          retryAfterSeconds: Math.max(1, Math.ceil(limit.retryAfterMs / 1000)),
        }));
      } else if (decision.kind === "allow" && decision.degraded) {
        metrics.degraded.inc();
        const userId = decision.identity?.userId;
        logDegraded("degraded", () => ({
          requestId,
          userId: userId === undefined ? undefined : loggedUser(userId),
          failureMode,
        }));
      } else if (decision.kind === "deny" && decision.status === 401 && decision.holder !== undefined) {
        const { userId, tier } = decision.holder;
        logUnknownTier(tier, () => ({ requestId, tier, subject: loggedSubject(userId) }));
      }
    },

    storeFailed(operation, error, requestId) {
      // Not tollgate_degraded_total: a failed call may end in a 503 or a 401, or in no check at all
      // (the rate limit service); decided() counts the allows that were made without the store.
      metrics.storeErrors.inc({ operation });
      if (storeUp) {
        storeUp = false;
        metrics.storeUp.set(0);
      }
      const now = clock();
      if (outage !== undefined) {
        outage.lastFailure = now;
        outage.failures += 1;
        return;
      }
      outage = { since: now, lastFailure: now, failures: 1 };
      logger.warn(
        { event: "store_down", requestId, operation, err: (error as Error).message, failureMode },
        "store unavailable: checks degrade",
      );
    },

    storeAnswered() {
      if (!storeUp) {
        storeUp = true;
        metrics.storeUp.set(1);
      }
      if (outage === undefined) return;
      const now = clock();
      if (now - outage.lastFailure < RECOVERED_AFTER_MS) return;
      const { since, failures } = outage;
      outage = undefined;
      logger.info(
        { event: "store_recovered", downMs: now - since, failures },
        "store answers again: enforcement resumed",
      );
    },

    connectionFailed(error) {
      logConnectionError("redis", { err: error.message });
    },
  };
}
