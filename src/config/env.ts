// Typed, validated settings from the environment: the only module that reads process.env.
import { availableParallelism } from "node:os";
import { type Env, Reader } from "./env-reader.js";
import {
  type IdentitySettings,
  OWN_ISSUER,
  parseClockTolerance,
  parseIdentitySettings,
} from "./identity-settings.js";
import { checkTlsFiles, readJwtKeys } from "./key-files.js";
import { ProblemsError } from "./problems.js";
import { parseRedisSettings, type RedisSettings } from "./redis-settings.js";
import type { Window } from "./rules.js";
import { parseLimit } from "./rules.js";
import { SETTINGS } from "./setting-names.js";
import { parseTracingSettings, type TracingSettings } from "./tracing-settings.js";
import { type UnknownSetting, unknownSettings } from "./unknown-settings.js";

export type FailureMode = "open" | "closed";
export type JwtAlgorithm = "HS256" | "HS384" | "HS512" | "RS256" | "ES256";
export type LogLevel = "fatal" | "error" | "warn" | "info" | "debug" | "trace" | "silent";
/** `auto`: readable lines on a terminal, JSON lines otherwise. */
export type LogFormat = "auto" | "json" | "pretty";

export type JwtSettings = {
  algorithms: JwtAlgorithm[];
  /** HMAC secret; generated per start outside production when unset. */
  secret: string | undefined;
  secretGenerated: boolean;
  privateKey: string | undefined;
  publicKey: string | undefined;
  issuer: string;
  audience: string | undefined;
  ttlSeconds: number;
  /** JWT_CLOCK_TOLERANCE_SECONDS: how far past `exp` (and before `nbf`) a token still passes, for clocks that disagree. */
  clockToleranceSeconds: number;
};

export const RLS_ALGORITHMS = ["fixed-window", "sliding-log", "sliding-counter", "gcra"] as const;
export type RlsAlgorithmSetting = (typeof RLS_ALGORITHMS)[number];

export type RlsSettings = {
  /** A YAML file or a folder of them, in envoyproxy/ratelimit's format. */
  configPath: string;
  /** The algorithm of a rate_limit without `algorithm:`. */
  defaultAlgorithm: RlsAlgorithmSetting;
  /** ShouldRateLimit answers or fails (UNAVAILABLE) within this; below Envoy's 20 ms default. */
  timeoutMs: number;
  /** RateLimit-Limit / -Remaining / -Reset in response_headers_to_add. */
  responseHeaders: boolean;
};

function parseRls(reader: Reader): RlsSettings | undefined {
  const configPath = reader.raw("RLS_CONFIG");
  const defaultAlgorithm = reader.oneOf<RlsAlgorithmSetting>("RLS_ALGORITHM", RLS_ALGORITHMS, "fixed-window");
  const timeoutMs = reader.int("RLS_TIMEOUT_MS", 15, 1, 60_000);
  const responseHeaders = reader.oneOf("RLS_RESPONSE_HEADERS", ["true", "false"], "false") === "true";
  return configPath === undefined ? undefined : { configPath, defaultAlgorithm, timeoutMs, responseHeaders };
}

/** Both files or neither: a certificate without its key (or the reverse) is a mistake, not plaintext. */
function parseGrpcTls(reader: Reader): Config["grpcTls"] {
  const certSet = reader.raw("GRPC_TLS_CERT_FILE") !== undefined;
  const keySet = reader.raw("GRPC_TLS_KEY_FILE") !== undefined;
  if (certSet !== keySet) {
    reader.problems.push(
      "GRPC_TLS_CERT_FILE and GRPC_TLS_KEY_FILE: set both for TLS, or neither for plaintext",
    );
    return undefined;
  }
  if (!certSet) return undefined;
  const cert = reader.file("GRPC_TLS_CERT_FILE");
  const key = reader.file("GRPC_TLS_KEY_FILE");
  if (cert === undefined || key === undefined || !checkTlsFiles(reader, cert, key)) return undefined;
  return { cert, key };
}

export type Config = {
  port: number;
  checkPort: number;
  adminPort: number;
  /** Bind address of the public listener, and of the others unless CHECK_HOST / ADMIN_HOST are set. */
  host: string;
  checkHost: string;
  adminHost: string;
  /** The gRPC listener (Envoy's ext_authz over gRPC, gRPC health): GRPC_PORT, GRPC_HOST. */
  grpcPort: number;
  grpcHost: string;
  /** PEM certificate chain and key: the gRPC listener speaks TLS; unset, plaintext HTTP/2 (h2c). */
  grpcTls: { cert: string; key: string } | undefined;
  /** Unset: the embedded memory store. */
  redis: RedisSettings | undefined;
  redisTimeoutMs: number;
  redisKeyPrefix: string;
  failureMode: FailureMode;
  jwt: JwtSettings;
  /** Provider tokens (OIDC_ISSUER / JWKS_URL) and API keys. */
  identity: IdentitySettings;
  sessionIdleTtlSeconds: number;
  sessionMaxAgeSeconds: number;
  maxSessionsPerUser: number;
  /** Failed logins per username (from any address) before 429: LOGIN_LOCKOUT, apart from the policy. */
  loginLockout: Window;
  policyFile: string | undefined;
  usersFile: string | undefined;
  adminToken: string;
  adminTokenGenerated: boolean;
  metricsToken: string | undefined;
  trustedProxyHops: number;
  /** Processes sharing the three ports (WORKERS; "auto" is one per core); 1 runs no supervisor. */
  workers: number;
  ipv6Subnet: number;
  logLevel: LogLevel;
  logFormat: LogFormat;
  /** How long /ready answers 503 after SIGTERM before the listeners stop accepting. */
  drainDelayMs: number;
  /** Refusals a process answers without the store until their window frees; 0 turns it off. */
  denialCacheSize: number;
  /** Connections each listener of a process holds at once; more are closed as they arrive. */
  maxConnections: number;
  /** Envoy's rate limit service: off without RLS_CONFIG. */
  rls: RlsSettings | undefined;
  /** OpenTelemetry spans over OTLP: off (undefined) without an endpoint. */
  tracing: TracingSettings | undefined;
  production: boolean;
  /** Started by `npm start` (whose script execs node, so npm is this process's parent). */
  startedByNpm: boolean;
  /** Variables that look like settings but are none (typos): ignored, and warned about at start-up. */
  unknownSettings: UnknownSetting[];
};

/** Every problem found in the environment, one line each, each naming its variable. */
export class ConfigError extends ProblemsError {
  constructor(problems: string[]) {
    super("invalid configuration", problems);
  }
}

const JWT_ALGORITHMS: readonly JwtAlgorithm[] = ["HS256", "HS384", "HS512", "RS256", "ES256"];
const LOG_LEVELS: readonly LogLevel[] = ["fatal", "error", "warn", "info", "debug", "trace", "silent"];
const LOG_FORMATS: readonly LogFormat[] = ["auto", "json", "pretty"];

function parseAlgorithms(reader: Reader): JwtAlgorithm[] {
  const value = reader.raw("JWT_ALGORITHMS") ?? "HS256";
  const algorithms: JwtAlgorithm[] = [];
  for (const item of value.split(",").map((s) => s.trim().toUpperCase())) {
    const algorithm = JWT_ALGORITHMS.find((a) => a === item);
    if (algorithm === undefined) {
      reader.problems.push(`JWT_ALGORITHMS: "${item}" is not supported (use ${JWT_ALGORITHMS.join(", ")})`);
    } else if (!algorithms.includes(algorithm)) {
      algorithms.push(algorithm);
    }
  }
  return algorithms.length > 0 ? algorithms : ["HS256"];
}

/** With a provider configured, JWT_ISSUER and JWT_AUDIENCE are the provider's: tollgate's own tokens say OWN_ISSUER. */
function parseJwt(
  reader: Reader,
  options: { production: boolean; provider: boolean; clockToleranceSeconds: number },
): JwtSettings {
  const { production, provider, clockToleranceSeconds } = options;
  const algorithms = parseAlgorithms(reader);
  const usesHmac = algorithms.some((a) => a.startsWith("HS"));
  let secret: string | undefined;
  let secretGenerated = false;
  if (usesHmac) {
    const s = reader.secret("JWT_SECRET", production, true);
    secret = s.value;
    secretGenerated = s.generated;
  }
  const { privateKey, publicKey } = readJwtKeys(reader, algorithms);
  return {
    algorithms,
    secret,
    secretGenerated,
    privateKey,
    publicKey,
    issuer: provider ? OWN_ISSUER : (reader.raw("JWT_ISSUER") ?? OWN_ISSUER),
    audience: provider ? undefined : reader.raw("JWT_AUDIENCE"),
    ttlSeconds: reader.int("JWT_TTL_SECONDS", 86_400, 60, 31 * 86_400),
    clockToleranceSeconds,
  };
}

const MAX_WORKERS = 256;

/** WORKERS: a whole number, or "auto" for one worker per core this process may use. */
function parseWorkers(reader: Reader): number {
  const value = reader.raw("WORKERS");
  if (value === undefined) return 1;
  if (value.toLowerCase() === "auto") return Math.min(MAX_WORKERS, availableParallelism());
  if (!/^\d+$/.test(value) || Number(value) < 1 || Number(value) > MAX_WORKERS) {
    reader.problems.push(
      `WORKERS: expected "auto" or a whole number from 1 to ${MAX_WORKERS}, got "${value}"`,
    );
    return 1;
  }
  return Number(value);
}

/** LOGIN_LOCKOUT: `<count>/<duration>` as a policy writes a limit; 10 failures in 15 minutes by default. */
function parseLoginLockout(reader: Reader): Window {
  const fallback = { limit: 10, windowMs: 15 * 60_000 };
  const value = reader.raw("LOGIN_LOCKOUT");
  if (value === undefined) return fallback;
  const window = parseLimit(value);
  if (window === undefined) {
    reader.problems.push(
      `LOGIN_LOCKOUT: expected <count>/<duration> such as 10/15m (a count from 1 to 1000000, a duration from 1s to 7d in s, m, h or d), got "${value}"`,
    );
    return fallback;
  }
  return window;
}

/** Parses and validates the environment; throws ConfigError listing every problem. */
export function loadConfig(env: Env = process.env): Config {
  const reader = new Reader(env);
  const production = reader.raw("NODE_ENV") === "production";
  const prefix = reader.raw("REDIS_KEY_PREFIX") ?? "tg:";
  if (!/^[A-Za-z0-9:_.-]{1,64}$/.test(prefix)) {
    reader.problems.push("REDIS_KEY_PREFIX: use 1 to 64 characters from A-Z a-z 0-9 : _ . -");
  }
  // Unset outside production: loopback only, so a laptop run never exposes the admin and check
  // ports to its network. Containers set HOST=0.0.0.0 (the Dockerfile does).
  const host = reader.host("HOST", production ? "0.0.0.0" : "127.0.0.1");
  const checkHost = reader.host("CHECK_HOST", host);
  const admin = reader.secret("ADMIN_TOKEN", production, false);
  if (!admin.generated) reader.bearerToken("ADMIN_TOKEN", admin.value);
  const metricsToken = reader.raw("METRICS_TOKEN");
  // Read once: it applies to tollgate's own tokens and the provider's alike.
  const clockToleranceSeconds = parseClockTolerance(reader);
  const identity = parseIdentitySettings(reader, { production, clockToleranceSeconds });
  const config: Config = {
    port: reader.port("PORT", 8080),
    checkPort: reader.port("CHECK_PORT", 9191),
    adminPort: reader.port("ADMIN_PORT", 9090),
    host,
    checkHost,
    adminHost: reader.host("ADMIN_HOST", host),
    grpcPort: reader.port("GRPC_PORT", 8081),
    grpcHost: reader.host("GRPC_HOST", checkHost),
    grpcTls: parseGrpcTls(reader),
    redis: parseRedisSettings((name) => reader.raw(name), reader.problems),
    redisTimeoutMs: reader.int("REDIS_TIMEOUT_MS", 100, 1, 60_000),
    redisKeyPrefix: prefix,
    failureMode: reader.oneOf<FailureMode>("FAILURE_MODE", ["open", "closed"], "open"),
    jwt: parseJwt(reader, { production, provider: identity.provider !== undefined, clockToleranceSeconds }),
    identity,
    sessionIdleTtlSeconds: reader.int("SESSION_IDLE_TTL_SECONDS", 1800, 1, 31 * 86_400),
    sessionMaxAgeSeconds: reader.int("SESSION_MAX_AGE_SECONDS", 86_400, 1, 366 * 86_400),
    maxSessionsPerUser: reader.int("MAX_SESSIONS_PER_USER", 5, 1, 1000),
    loginLockout: parseLoginLockout(reader),
    policyFile: reader.raw("POLICY_FILE"),
    usersFile: reader.raw("USERS_FILE"),
    adminToken: admin.value,
    adminTokenGenerated: admin.generated,
    metricsToken,
    trustedProxyHops: reader.int("TRUSTED_PROXY_HOPS", 1, 0, 10),
    workers: parseWorkers(reader),
    ipv6Subnet: reader.int("IPV6_SUBNET", 64, 1, 128),
    logLevel: reader.oneOf<LogLevel>("LOG_LEVEL", LOG_LEVELS, "info"),
    logFormat: reader.oneOf<LogFormat>("LOG_FORMAT", LOG_FORMATS, "auto"),
    drainDelayMs: reader.int("DRAIN_DELAY_MS", 5_000, 0, 600_000),
    denialCacheSize: reader.int("DENIAL_CACHE_SIZE", 100_000, 0, 10_000_000),
    maxConnections: reader.int("MAX_CONNECTIONS", 10_000, 1, 1_000_000),
    rls: parseRls(reader),
    tracing: parseTracingSettings((name) => reader.raw(name), reader.problems),
    production,
    startedByNpm: reader.raw("npm_lifecycle_event") === "start",
    unknownSettings: unknownSettings(env, SETTINGS),
  };
  if (config.workers > 1 && config.redis === undefined) {
    // Each worker's memory store would count and keep sessions on its own: limits would multiply.
    reader.problems.push(
      "WORKERS: more than one worker needs Redis (REDIS_URL, REDIS_CLUSTER_NODES or REDIS_SENTINELS); the memory store is one process only",
    );
  }
  if (metricsToken !== undefined) {
    reader.bearerToken("METRICS_TOKEN", metricsToken);
    reader.strongEnough("METRICS_TOKEN", metricsToken, production, { minBytes: 16, always: false });
  }
  // Every port setting read above, a new listener's included: no two may name the same port.
  for (const [i, { name, value }] of reader.ports.entries()) {
    const clash = reader.ports.slice(0, i).find((other) => other.value === value);
    if (clash !== undefined) reader.problems.push(`${name}: ${value} is already used by ${clash.name}`);
  }
  if (reader.problems.length > 0) throw new ConfigError(reader.problems);
  return config;
}
