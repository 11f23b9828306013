// Wires one tollgate from its parts: the policy in force, services, what its listeners serve (the
// APIs, the check front ends' context), the observer. Which listeners there are: src/listeners.ts.
import { type AuthService, createAuthService } from "./auth/auth-service.js";
import { createCredentialReader } from "./auth/credentials.js";
import { createTokenService, type TokenService } from "./auth/jwt.js";
import { createLockout } from "./auth/lockout.js";
import {
  createProviderKeys,
  type KeyTimings,
  logKeyFetches,
  type ProviderKeys,
} from "./auth/provider-keys.js";
import { createProviderTokens } from "./auth/provider-tokens.js";
import { DEMO_USER_IDS } from "./auth/users-file.js";
import { type Checker, createChecker } from "./check/checker.js";
import { createDeadSessions } from "./check/dead-sessions.js";
import { createDenialCache } from "./check/denial-cache.js";
import type { Config } from "./config/env.js";
import { providerTierProblems } from "./config/identity-settings.js";
import { apiKeyHeaders } from "./frontends/api-key-headers.js";
import { createRlsCore, type RlsDecide } from "./frontends/envoy-grpc/rls.js";
import { rlsRules } from "./frontends/envoy-grpc/rls-rules.js";
import type { CheckContext } from "./frontends/front-end.js";
import { createAdminApi } from "./http/admin-api.js";
import type { HttpHandler } from "./http/http-listener.js";
import { createPublicApi } from "./http/public-api.js";
import { withRequestSpans } from "./http/request-spans.js";
import { createCheckObserver } from "./metrics/check-observer.js";
import { createMetrics, type Metrics } from "./metrics/metrics.js";
import { createRlsObserver, createRpcObserver } from "./metrics/rpc-observer.js";
import type { Policy } from "./policy/policy.js";
import { createPolicyState, type PolicyState, type ReloadResult } from "./policy/policy-state.js";
import type { ReloadTrigger, WorkerReload } from "./policy/reload-report.js";
import type { Logger } from "./process/logger.js";
import type { Readiness } from "./process/readiness.js";
import { adminReload, createReloads, type Reloads } from "./reloads.js";
import { createRlsState, type RlsState } from "./rls/state.js";
import { createDeadline } from "./store/failure.js";
import type { Store } from "./store/store.js";
import type { Tracing } from "./tracing/tracing.js";

export type Tollgate = {
  publicApp: HttpHandler;
  adminApp: HttpHandler;
  /** What every check front end is given: the checker, the client-IP settings, the observer. */
  checks: CheckContext;
  checker: Checker;
  auth: AuthService;
  tokens: TokenService;
  /** The identity provider's keys (OIDC_ISSUER / JWKS_URL), fetching from creation on; undefined without one. */
  providerKeys: ProviderKeys | undefined;
  metrics: Metrics;
  policy: PolicyState;
  /** Reloads POLICY_FILE and RLS_CONFIG (counted and logged), from the files or from a reading of them. */
  reloads: Reloads;
  /** Re-reads POLICY_FILE (SIGHUP, the admin endpoint): counted and logged; RLS_CONFIG too. */
  reloadPolicy(trigger: ReloadTrigger): ReloadResult;
  /** Envoy's rate limit service, when RLS_CONFIG is set: its configuration and its decision. */
  rls: { state: RlsState; decide: RlsDecide } | undefined;
  /** Stops what runs beside the listeners (the watches on POLICY_FILE and RLS_CONFIG). */
  close(): void;
};

export type TollgateOptions = {
  config: Config;
  policy: Policy;
  store: Store;
  logger: Logger;
  metrics?: Metrics;
  /** Start-up and stop phases; always ready when omitted (tests that build one in-process). */
  readiness?: Readiness;
  /**
   * WORKERS: what the admin reload runs instead of a reload here: a reload on every worker, each
   * worker's part once all confirmed or the wait ended.
   */
  reloadEverywhere?: (trigger: "admin") => Promise<WorkerReload[]>;
  /** Whether this process watches POLICY_FILE and RLS_CONFIG (a worker does not: its primary does). */
  watchFiles?: boolean;
  /** RLS_CONFIG as main.ts loaded it (start-up reports an invalid one); loaded here when omitted. */
  rls?: RlsState;
  /** The provider keys' refresh timings (tests shorten them). */
  keyTimings?: KeyTimings;
  /** Spans of checks, logins and admin calls (OTEL_EXPORTER_OTLP_ENDPOINT); none when omitted. */
  tracing?: Tracing | undefined;
};

/** The store with each call of its ports a span, a child of the request span it is made in. */
function tracedStore(store: Store, tracing: Tracing): Store {
  const attributes = { "db.system.name": store.kind };
  return {
    ...store,
    users: tracing.traced(store.users, "users", attributes),
    sessions: tracing.traced(store.sessions, "sessions", attributes),
    limiter: tracing.traced(store.limiter, "limiter", attributes),
    unguarded: { limiter: tracing.traced(store.unguarded.limiter, "limiter", attributes) },
  };
}

/** Which API requests get a span: not the probes and scrapes, which would drown the rest. */
const UNTRACED = new Set(["/health", "/ready", "/metrics"]);
const traced = (path: string): boolean => !UNTRACED.has(path);

export function createTollgate(options: TollgateOptions): Tollgate {
  const { config, logger, tracing } = options;
  const store = tracing === undefined ? options.store : tracedStore(options.store, tracing);
  const metrics = options.metrics ?? createMetrics();
  const tokens = createTokenService(config.jwt);
  const { provider } = config.identity;
  const providerKeys = provider === undefined ? undefined : createProviderKeys(provider, options.keyTimings);
  if (provider !== undefined && providerKeys !== undefined) logKeyFetches(providerKeys, logger, provider);
  providerKeys?.start();
  const credentials = createCredentialReader({
    tokens,
    provider:
      provider === undefined || providerKeys === undefined
        ? undefined
        : createProviderTokens(provider, providerKeys),
  });
  const clientIp = { trustedProxyHops: config.trustedProxyHops, ipv6Subnet: config.ipv6Subnet };
  const policy = createPolicyState({
    file: config.policyFile,
    initial: options.policy,
    ...(provider === undefined
      ? {}
      : { requirements: (next: Policy) => providerTierProblems(provider, next.tiers.keys()) }),
  });
  metrics.policyInfo.set({ version: policy.current().version }, 1);
  // Demo users never log in or pass a check in production, whatever the store holds.
  const refusedUserIds = config.production ? DEMO_USER_IDS : new Set<string>();
  const lockout = createLockout({ window: config.loginLockout, limiter: store.limiter });
  const auth = createAuthService({
    config,
    users: store.users,
    sessions: store.sessions,
    lockout,
    tokens,
    logger,
    onEvent: (event) => metrics.authEvents.inc({ event }),
    refusedUserIds,
  });

  // Refusals answered without the store; only while announcements of freed subjects arrive. Subscribed
  // without a cache too: the subscription hears the acknowledgements that this instance's changes wait for.
  const denials =
    config.denialCacheSize > 0 ? createDenialCache({ maxEntries: config.denialCacheSize }) : undefined;
  store.invalidations.subscribe({
    message: (subject) => denials?.invalidate(subject),
    health: (healthy) => denials?.setEnabled(healthy),
  });
  policy.onChange((active) => {
    metrics.policyInfo.reset();
    metrics.policyInfo.set({ version: active.version }, 1);
    // Limits may have grown: no refusal of the old policy stands, here (at once) or on another instance.
    store.invalidations.publish("*").catch(() => undefined);
  });

  const observer = createCheckObserver({ metrics, logger, failureMode: config.failureMode });
  store.onConnectionError((error) => observer.connectionFailed(error));
  const checker = createChecker({
    policy: () => policy.current().compiled,
    denials,
    // At most 100,000 (about 10 MB): past that the oldest are forgotten and cost a lookup again.
    deadSessions: createDeadSessions({ maxEntries: 100_000 }),
    credentials,
    externalDefaultTier: provider?.defaultTier,
    limiter: store.unguarded.limiter,
    failureMode: config.failureMode,
    timeoutMs: config.redisTimeoutMs,
    idleMs: config.sessionIdleTtlSeconds * 1000,
    refusedUserIds,
    onStoreError: (operation, error, requestId) => observer.storeFailed(operation, error, requestId),
    onStoreOk: () => observer.storeAnswered(),
    onCachedRefusal: () => metrics.denialCacheAnswers.inc(),
  });
  const checks: CheckContext = {
    checker,
    clientIp,
    apiKeyHeader: config.identity.apiKeyHeader,
    apiKeyHeaders: config.identity.forwardApiKey ? undefined : apiKeyHeaders(config.identity.apiKeyHeader),
    logger,
    onDecision: (protocol, decision, seconds, ip, requestId) =>
      observer.decided(protocol, decision, seconds, ip, requestId),
    readiness: options.readiness,
    rpc: createRpcObserver(metrics),
    tracing,
  };

  const rlsState =
    options.rls ??
    (config.rls === undefined
      ? undefined
      : createRlsState({ path: config.rls.configPath, defaultAlgorithm: config.rls.defaultAlgorithm }));
  const rlsDecide =
    rlsState === undefined || config.rls === undefined
      ? undefined
      : createRlsCore({
          rules: rlsRules(() => rlsState.current()),
          limiter: store.unguarded.limiter,
          denials,
          deadline: createDeadline(config.rls.timeoutMs),
          responseHeaders: config.rls.responseHeaders,
          onDescriptor: createRlsObserver(metrics),
          onStoreError: (error, requestId) => observer.storeFailed("hit", error, requestId),
          onStoreOk: () => observer.storeAnswered(),
          // One label value of the check histogram: Envoy's RLS timeout (20 ms) beside ext_authz's.
          durations: metrics.checkDuration.labels("envoy-rls"),
        });

  const reloads = createReloads({
    policy,
    rls: rlsState,
    metrics,
    logger,
    onRlsChange: () => store.invalidations.publish("*").catch(() => undefined),
  });
  // Under WORKERS the primary watches the files and hands every worker the same reading.
  if (options.watchFiles !== false) reloads.watch();

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
    lockout,
    policy,
    reloadPolicy: adminReload(reloads, options.reloadEverywhere),
    checker,
    rls: () => rlsState?.current(),
    ipv6Subnet: config.ipv6Subnet,
    logger,
    metrics,
    adminToken: config.adminToken,
    metricsToken: config.metricsToken,
    readyTimeoutMs: config.redisTimeoutMs,
    readiness,
  });
  return {
    publicApp: withRequestSpans(publicApp, { tracing, traced }),
    adminApp: withRequestSpans(adminApp, { tracing, traced }),
    checks,
    checker,
    auth,
    tokens,
    providerKeys,
    metrics,
    policy,
    reloads,
    reloadPolicy: (trigger) => reloads.reload(trigger).policy,
    rls:
      rlsState === undefined || rlsDecide === undefined ? undefined : { state: rlsState, decide: rlsDecide },
    close: () => {
      policy.close();
      rlsState?.close();
      providerKeys?.stop();
    },
  };
}
