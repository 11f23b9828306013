// The names of every variable tollgate reads: the one list that settings, docs and warnings follow.
import { REDIS_SETTINGS } from "./redis-settings.js";
import { TRACING_SETTINGS } from "./tracing-settings.js";

/**
 * Every variable tollgate reads, and no other: env.ts's Reader takes only these names. Besides
 * the settings, ENV_FILE (main.ts), the demo upstream's UPSTREAM_PORT and npm's
 * npm_lifecycle_event; any other variable that looks like a
 * setting is warned about at start-up (unknown-settings.ts).
 */
export const SETTINGS = [
  "PORT",
  "CHECK_PORT",
  "ADMIN_PORT",
  "HOST",
  "CHECK_HOST",
  "ADMIN_HOST",
  "GRPC_PORT",
  "GRPC_HOST",
  "GRPC_TLS_CERT_FILE",
  "GRPC_TLS_KEY_FILE",
  "UPSTREAM_PORT",
  ...REDIS_SETTINGS,
  "REDIS_TIMEOUT_MS",
  "REDIS_KEY_PREFIX",
  "FAILURE_MODE",
  "JWT_SECRET",
  "JWT_ALGORITHMS",
  "JWT_PRIVATE_KEY_FILE",
  "JWT_PUBLIC_KEY_FILE",
  "JWT_ISSUER",
  "JWT_AUDIENCE",
  "JWT_TTL_SECONDS",
  "JWT_CLOCK_TOLERANCE_SECONDS",
  "OIDC_ISSUER",
  "JWKS_URL",
  "JWT_PROVIDER_ALGORITHMS",
  "JWT_PROVIDER_ALLOW_HTTP",
  "JWT_PROVIDER_REQUIRE_AT_JWT",
  "JWT_PROVIDER_CACHE_SIZE",
  "JWT_SUBJECT_CLAIM",
  "JWT_TIER_CLAIM",
  "JWT_TIER_MAP",
  "EXTERNAL_DEFAULT_TIER",
  "API_KEY_HEADER",
  "API_KEY_FORWARD",
  "SESSION_IDLE_TTL_SECONDS",
  "SESSION_MAX_AGE_SECONDS",
  "MAX_SESSIONS_PER_USER",
  "LOGIN_LOCKOUT",
  "POLICY_FILE",
  "USERS_FILE",
  "ADMIN_TOKEN",
  "METRICS_TOKEN",
  "TRUSTED_PROXY_HOPS",
  "IPV6_SUBNET",
  "LOG_LEVEL",
  "LOG_FORMAT",
  "WORKERS",
  "DRAIN_DELAY_MS",
  "DENIAL_CACHE_SIZE",
  "MAX_CONNECTIONS",
  "RLS_CONFIG",
  "RLS_ALGORITHM",
  "RLS_TIMEOUT_MS",
  "RLS_RESPONSE_HEADERS",
  ...TRACING_SETTINGS,
  "ENV_FILE",
  // Read by the tollgate command (src/cli/), not the server; known, so that a .env holding it is not warned about.
  "TOLLGATE_ADMIN_URL",
  "NODE_ENV",
  "npm_lifecycle_event",
] as const;

export type SettingName = (typeof SETTINGS)[number];
