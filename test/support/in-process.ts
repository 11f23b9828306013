// The one tollgate the tests build in this process: its four listeners on free loopback ports, its log
// lines kept, and clients of its public and admin APIs. On a fresh Redis store of its own by default,
// on another instance's Redis, or on a store the test gives (memory, Cluster, Sentinel).
import { randomBytes } from "node:crypto";
import type { Redis } from "ioredis";
import { expect } from "vitest";
import { createTollgate, type Tollgate } from "../../src/app.js";
import { createLockout } from "../../src/auth/lockout.js";
import type { KeyTimings } from "../../src/auth/provider-keys.js";
import { demoUsers, loadUsers } from "../../src/auth/users-file.js";
import type { Decision } from "../../src/check/types.js";
import { loadConfig } from "../../src/config/env.js";
import { loadPolicy, type Policy } from "../../src/policy/policy.js";
import { createLogger } from "../../src/process/logger.js";
import type { WatchdogTimings } from "../../src/store/redis/watchdog.js";
import { createRedisStore, type Store } from "../../src/store/store.js";
import { type ApiReply, type Client, client, type ErrorBody, type LoginBody } from "./http-client.mjs";
import { serveListeners } from "./listeners.js";
import { connectRedis, testPrefix } from "./redis.js";
import { ADMIN_TOKEN, JWT_SECRET } from "./secrets.mjs";

export type LoginOptions = { device?: string; ip?: string; userAgent?: string };

export type InProcess = {
  tollgate: Tollgate;
  store: Store;
  checkUrl: string;
  /** The gRPC listener (ext_authz Check, health), as http://host:port. */
  grpcUrl: string;
  publicUrl: string;
  adminUrl: string;
  adminToken: string;
  /** Clients of the public and admin listeners. */
  api: Client;
  admin: Client;
  /** POST /auth/login as a client behind the proxy at `ip`. */
  login(username: string, password: string, options?: LoginOptions): Promise<ApiReply<LoginBody | ErrorBody>>;
  /** Logs in and insists on 200. */
  loginOk(username: string, password: string, options?: LoginOptions): Promise<LoginBody>;
  /** A new user through the admin API, with a unique name: a clean slate for one test. */
  newUser(tier?: string): Promise<{ id: string; username: string; password: string }>;
  /** One check as the proxy would ask it (no HTTP), for `GET /api/search` unless told otherwise. */
  check(token: string, path?: string): Promise<Decision>;
  /** Every line the logger wrote so far, exactly as written. */
  logWrites(): string[];
  /** Closes its listeners, and its store unless the store is another's or the test's. */
  close(): Promise<void>;
};

/** A tollgate on a Redis store that it made (or shares): the client and the key prefix of that store. */
export type InProcessOnRedis = InProcess & { redis: Redis; prefix: string };

type CommonOptions = {
  /** Environment for loadConfig, over the defaults: the shared secrets (secrets.mjs), LOG_LEVEL=info. */
  env?: Record<string, string>;
  /** The policy, instead of loading POLICY_FILE (or the built-in one). */
  policy?: Policy;
  /** Load alice, bob_pro and ent_carol (password "secret") into a store of its own or given; default true. */
  demoUsers?: boolean;
  /** The identity provider keys' refresh timings, shorter than production's so that tests stay short. */
  keyTimings?: KeyTimings;
};

export type OnRedisOptions = CommonOptions & {
  /** Share a store (and its key prefix) with another instance instead of a fresh one. */
  shareWith?: InProcessOnRedis;
  /** Another tollgate on the same Redis and key prefix, with connections of its own (another host). */
  peerOf?: InProcessOnRedis;
  /** The Redis client of a fresh store (default: the tests' own client of the shared Redis). */
  redis?: Redis;
  /** The fresh store's connection watchdog, shorter than production's so that tests stay short. */
  watchdog?: WatchdogTimings;
};

/** On a store the test made and closes itself. */
export type OnStoreOptions = CommonOptions & { store: Store };

/** Builds a tollgate (listeners included) as main.ts does, but in this process, so tests can reach its parts. */
export function startInProcess(options: OnStoreOptions): Promise<InProcess>;
export function startInProcess(options?: OnRedisOptions): Promise<InProcessOnRedis>;
export async function startInProcess(
  options: OnStoreOptions | OnRedisOptions = {},
): Promise<InProcess | InProcessOnRedis> {
  const config = loadConfig({ JWT_SECRET, ADMIN_TOKEN, LOG_LEVEL: "info", ...options.env });
  let store: Store;
  let onRedis: { redis: Redis; prefix: string } | undefined;
  /** Whether the store is this instance's own, to close with it; and fresh, to load the demo users into. */
  let own = false;
  let fresh = true;
  if ("store" in options) {
    store = options.store;
  } else {
    const shared = options.shareWith;
    const redis = shared?.redis ?? options.redis ?? connectRedis();
    const prefix = shared?.prefix ?? options.peerOf?.prefix ?? testPrefix();
    onRedis = { redis, prefix };
    own = shared === undefined;
    fresh = shared === undefined && options.peerOf === undefined;
    store =
      shared?.store ??
      createRedisStore({
        redis,
        prefix,
        timeoutMs: 1000,
        ...(options.watchdog === undefined ? {} : { watchdog: options.watchdog }),
      });
  }
  const writes: string[] = [];
  const logger = createLogger(config.logLevel, {
    write(line: string) {
      writes.push(line);
    },
  });
  if (fresh && options.demoUsers !== false) await loadUsers(store.users, demoUsers());
  const tollgate = createTollgate({
    config,
    policy: options.policy ?? loadPolicy(config.policyFile),
    store,
    logger,
    ...(options.keyTimings === undefined ? {} : { keyTimings: options.keyTimings }),
  });
  // The listeners exactly as src/listeners.ts lists them, on ports the system picks.
  const serving = await serveListeners(config, tollgate);
  const [checkUrl, publicUrl, adminUrl] = [serving.url("check"), serving.url("public"), serving.url("admin")];
  const grpcUrl = serving.url("grpc");
  const api = client(publicUrl);
  const admin = client(adminUrl);
  const login: InProcess["login"] = (username, password, o = {}) =>
    api<LoginBody | ErrorBody>("POST", "/auth/login", {
      json: { username, password },
      headers: {
        "x-forwarded-for": o.ip ?? "198.51.100.7",
        "user-agent": o.userAgent ?? "identity-contract/1.0",
        ...(o.device === undefined ? {} : { "x-device-name": o.device }),
      },
    });
  const running: InProcess = {
    tollgate,
    store,
    checkUrl,
    grpcUrl,
    publicUrl,
    adminUrl,
    adminToken: config.adminToken,
    api,
    admin,
    login,
    async loginOk(username, password, o) {
      const reply = await login(username, password, o);
      expect(reply.status, JSON.stringify(reply.body)).toBe(200);
      return reply.body as LoginBody;
    },
    async newUser(tier = "free") {
      const username = uniqueName("user");
      const password = `pw-${randomBytes(6).toString("hex")}`;
      const reply = await admin<{ user_id: string }>("POST", "/admin/users", {
        token: config.adminToken,
        json: { username, password, tier },
      });
      expect(reply.status, JSON.stringify(reply.body)).toBe(201);
      return { id: reply.body.user_id, username, password };
    },
    async check(token, path = "/api/search") {
      return tollgate.checker({ method: "GET", path, authorization: `Bearer ${token}`, ip: "203.0.113.5" });
    },
    logWrites: () => [...writes],
    async close() {
      tollgate.close();
      await serving.close();
      // Its subscriber connection too (store.close), unless another instance still uses the store.
      if (own) await store.close().catch(() => onRedis?.redis.disconnect());
    },
  };
  return onRedis === undefined ? running : { ...running, ...onRedis };
}

/** Logs a demo user in through the auth service itself (no HTTP) and returns the access token. */
export async function demoToken(auth: Tollgate["auth"], username: string): Promise<string> {
  const login = await auth.login({
    username,
    password: "secret",
    ip: "192.0.2.1",
    userAgent: "test",
    deviceName: "test",
  });
  if (login.kind !== "ok") throw new Error(`login of ${username} failed: ${login.kind}`);
  return login.token;
}

export const uniqueName = (stem: string): string => `${stem}_${randomBytes(4).toString("hex")}`;

/**
 * What start-up applies USERS_FILE to on `store`: its users, sessions, API keys (with the built-in
 * policy's categories, whose windows a revoked key leaves) and the names' lockout.
 */
export const fileTarget = (store: Store) => ({
  users: store.users,
  sessions: store.sessions,
  apiKeys: store.apiKeys,
  limiter: store.limiter,
  categories: loadPolicy(undefined).categories,
  // Its window (LOGIN_LOCKOUT's default) matters to counting failures, not to clearing them.
  lockout: createLockout({ window: { limit: 10, windowMs: 900_000 }, limiter: store.limiter }),
});

/** A wait that is already over (a deadline computed as passed) resolves on the next timer turn. */
export const sleep = (ms: number): Promise<void> =>
  new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));

/** The claims of a JWT, read without verifying it. */
export function claimsOf(token: string): Record<string, unknown> {
  const payload = token.split(".")[1] ?? "";
  return JSON.parse(Buffer.from(payload, "base64url").toString("utf8")) as Record<string, unknown>;
}
