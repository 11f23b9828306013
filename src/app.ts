// Wires one tollgate from its parts: services, the three listeners' handlers, metrics and logs.
import type { Server } from "node:http";
import type { Express } from "express";
import { type AuthService, createAuthService } from "./auth/auth-service.js";
import { createTokenService, type TokenService } from "./auth/jwt.js";
import { DEMO_USER_IDS } from "./auth/users-file.js";
import { type Checker, createChecker } from "./authz/checker.js";
import { compilePolicy, type Decision } from "./authz/decide.js";
import { createDenialCache } from "./authz/denial-cache.js";
import type { Config } from "./config/env.js";
import type { Policy } from "./config/policy.js";
import { createAdminApi } from "./http/admin-api.js";
import { type CheckProtocol, createCheckServer } from "./http/check-listener.js";
import { retryAfterSeconds } from "./http/check-responses.js";
import { createPublicApi } from "./http/public-api.js";
import type { Logger } from "./logger.js";
import { createMetrics, type Metrics } from "./metrics/metrics.js";
import { ipSubject, userSubject } from "./ratelimit/types.js";
import type { Readiness } from "./readiness.js";
import type { Store } from "./store/store.js";
import { createThrottledLog } from "./throttled-log.js";

export type Tollgate = {
  publicApp: Express;
  adminApp: Express;
  checkServer: Server;
  checker: Checker;
  auth: AuthService;
  tokens: TokenService;
  metrics: Metrics;
};

export type TollgateOptions = {
  config: Config;
  policy: Policy;
  store: Store;
  logger: Logger;
  metrics?: Metrics;
  /** Start-up and stop phases; always ready when omitted (tests that build one in-process). */
  readiness?: Readiness;
};

function decisionLabels(decision: Decision): {
  decision: string;
  reason: string;
  tier: string;
  category: string;
} {
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

export function createTollgate(options: TollgateOptions): Tollgate {
  const { config, policy, store, logger } = options;
  const metrics = options.metrics ?? createMetrics();
  const tokens = createTokenService(config.jwt);
  const clientIp = { trustedProxyHops: config.trustedProxyHops, ipv6Subnet: config.ipv6Subnet };
  // Demo users never log in or pass a check in production, whatever the store holds.
  const refusedUserIds = config.production ? DEMO_USER_IDS : new Set<string>();
  const auth = createAuthService({
    config,
    policy,
    store,
    tokens,
    logger,
    onEvent: (event) => metrics.authEvents.inc({ event }),
    refusedUserIds,
  });

  let storeUp = true;
  metrics.storeUp.set(1);
  const compiled = compilePolicy(policy);
  // Refusals answered without the store; only while announcements of freed subjects arrive.
  const denials =
    config.denialCacheSize > 0 ? createDenialCache({ maxEntries: config.denialCacheSize }) : undefined;
  if (denials !== undefined) {
    store.invalidations.subscribe({
      message: (subject) => denials.invalidate(subject),
      health: (healthy) => denials.setEnabled(healthy),
    });
  }
  const checker = createChecker({
    policy: () => compiled,
    denials,
    tokens,
    authorizer: store.checks.authorizer,
    limiter: store.checks.limiter,
    failureMode: config.failureMode,
    timeoutMs: config.redisTimeoutMs,
    idleMs: config.sessionIdleTtlSeconds * 1000,
    refusedUserIds,
    onStoreError(operation, error) {
      metrics.storeErrors.inc({ operation });
      if (config.failureMode === "open") metrics.degraded.inc();
      if (storeUp) {
        storeUp = false;
        metrics.storeUp.set(0);
        logger.warn(
          { event: "store_down", operation, err: (error as Error).message, failureMode: config.failureMode },
          "store unavailable: checks degrade",
        );
      }
    },
    onStoreOk() {
      if (!storeUp) {
        storeUp = true;
        metrics.storeUp.set(1);
        logger.info({ event: "store_recovered" }, "store answers again: enforcement resumed");
      }
    },
  });

  // Label-bound metric children, resolved once per label set rather than hashed on every check.
  const durations = new Map<CheckProtocol, ReturnType<typeof metrics.checkDuration.labels>>();
  const durationChild = (protocol: CheckProtocol) => {
    let child = durations.get(protocol);
    if (child === undefined) {
      child = metrics.checkDuration.labels({ protocol });
      durations.set(protocol, child);
    }
    return child;
  };
  const decisionChildren = new Map<string, ReturnType<typeof metrics.decisions.labels>>();
  const decisionChild = (decision: Decision) => {
    const labels = decisionLabels(decision);
    const key = `${labels.decision}|${labels.reason}|${labels.tier}|${labels.category}`;
    let child = decisionChildren.get(key);
    if (child === undefined) {
      child = metrics.decisions.labels(labels);
      decisionChildren.set(key, child);
    }
    return child;
  };

  // ioredis prints each failed (re)connect to stderr as plain text when nobody listens for "error".
  const logConnectionError = createThrottledLog({
    logger,
    level: "warn",
    event: "store_connection_error",
    message: "cannot reach the store",
  });
  store.onConnectionError((error) => logConnectionError("redis", { err: error.message }));

  const logDenial = createThrottledLog({
    logger,
    level: "info",
    event: "rate_limited",
    message: "request denied: rate limit exceeded",
  });
  const logDegraded = createThrottledLog({
    logger,
    level: "warn",
    event: "degraded",
    message: "request allowed without the store (FAILURE_MODE=open)",
  });
  const logShadow = createThrottledLog({
    logger,
    level: "info",
    event: "shadow_denied",
    message: "request over a shadow-mode limit allowed (it would have been denied)",
  });
  const checkServer = createCheckServer({
    checker,
    clientIp,
    logger,
    onDecision(protocol: CheckProtocol, decision, seconds, ip) {
      durationChild(protocol).observe(seconds);
      decisionChild(decision).inc();
      const over =
        decision.kind === "deny" && decision.status === 429
          ? { log: logDenial, limit: decision.limit, identity: decision.identity }
          : decision.kind === "allow" && decision.limit?.shadow === true
            ? { log: logShadow, limit: decision.limit, identity: decision.identity }
            : undefined;
      if (over !== undefined) {
        const { limit, identity } = over;
        const subject = identity === undefined ? ipSubject(ip) : userSubject(identity.userId);
        // The fields are built only for the one line per subject and second that is written.
        over.log(`${subject}|${limit.category}`, () => ({
          subject,
          category: limit.category,
          tier: limit.tier,
          retryAfterSeconds: retryAfterSeconds(limit),
        }));
      } else if (decision.kind === "allow" && decision.degraded) {
        logDegraded("degraded", { userId: decision.identity?.userId, failureMode: config.failureMode });
      }
    },
  });

  const { readiness } = options;
  const publicApp = createPublicApi({
    auth,
    store,
    logger,
    clientIp,
    readyTimeoutMs: config.redisTimeoutMs,
    readiness,
  });
  const adminApp = createAdminApi({
    store,
    policy,
    logger,
    metrics,
    adminToken: config.adminToken,
    metricsToken: config.metricsToken,
    readyTimeoutMs: config.redisTimeoutMs,
    readiness,
  });
  return { publicApp, adminApp, checkServer, checker, auth, tokens, metrics };
}
