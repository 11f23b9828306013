// One tollgate in this process on a real Redis: its three listeners on free ports, its log lines kept.
import type { Redis } from "ioredis";
import { createTollgate, type Tollgate } from "../../src/app.js";
import { demoUsers, loadUsers } from "../../src/auth/users-file.js";
import { loadConfig } from "../../src/config/env.js";
import { loadPolicy } from "../../src/policy/policy.js";
import { createLogger } from "../../src/process/logger.js";
import type { WatchdogTimings } from "../../src/store/redis/watchdog.js";
import { createRedisStore, type Store } from "../../src/store/store.js";
import { serveListeners } from "./listeners.js";
import { connectRedis, testPrefix } from "./redis.js";

export const IN_PROCESS_JWT_SECRET = "in-process-jwt-secret-0123456789-abcdef";
export const IN_PROCESS_ADMIN_TOKEN = "in-process-admin-token-0123456789-abcdef";

export type InProcess = {
  tollgate: Tollgate;
  store: Store;
  redis: Redis;
  prefix: string;
  checkUrl: string;
  publicUrl: string;
  adminUrl: string;
  adminToken: string;
  /** Every line the logger wrote so far, exactly as written. */
  logWrites(): string[];
  close(): Promise<void>;
};

export type InProcessOptions = {
  /** Environment for loadConfig, over test defaults (secrets, LOG_LEVEL=info). */
  env?: Record<string, string>;
  /** Share a store (and its key prefix) with another instance instead of a fresh one. */
  shareWith?: InProcess;
  /** Another tollgate on the same Redis and key prefix, with connections of its own (another host). */
  peerOf?: InProcess;
  /** Load alice, bob_pro and ent_carol (password "secret"); default true. */
  demoUsers?: boolean;
  /** The Redis client of a fresh store (default: the tests' own client of the shared Redis). */
  redis?: Redis;
  /** The fresh store's connection watchdog, shorter than production's so that tests stay short. */
  watchdog?: WatchdogTimings;
};

/** Builds a tollgate (listeners included) as main.ts does, but in this process, so tests can reach its parts. */
export async function startInProcess(options: InProcessOptions = {}): Promise<InProcess> {
  const env = {
    JWT_SECRET: IN_PROCESS_JWT_SECRET,
    ADMIN_TOKEN: IN_PROCESS_ADMIN_TOKEN,
    LOG_LEVEL: "info",
    ...options.env,
  };
  const config = loadConfig(env);
  const shared = options.shareWith;
  const redis = shared?.redis ?? options.redis ?? connectRedis();
  const prefix = shared?.prefix ?? options.peerOf?.prefix ?? testPrefix();
  const store =
    shared?.store ??
    createRedisStore({
      redis,
      prefix,
      timeoutMs: 1000,
      ...(options.watchdog === undefined ? {} : { watchdog: options.watchdog }),
    });
  const writes: string[] = [];
  const logger = createLogger(config.logLevel, {
    write(line: string) {
      writes.push(line);
    },
  });
  if (shared === undefined && options.peerOf === undefined && options.demoUsers !== false) {
    await loadUsers(store.users, demoUsers());
  }
  const tollgate = createTollgate({ config, policy: loadPolicy(config.policyFile), store, logger });
  const serving = await serveListeners(config, tollgate);
  return {
    tollgate,
    store,
    redis,
    prefix,
    checkUrl: serving.url("check"),
    publicUrl: serving.url("public"),
    adminUrl: serving.url("admin"),
    adminToken: config.adminToken,
    logWrites: () => [...writes],
    async close() {
      await serving.close();
      // Its subscriber connection too (store.close), unless another instance still uses the store.
      if (shared === undefined) await store.close().catch(() => redis.disconnect());
    },
  };
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
