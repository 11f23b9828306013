// The composition of one store: Redis (one server, a Cluster or Sentinel) when configured, otherwise the embedded memory store.

import type { AuthorizeStore, SessionStore, UserStore } from "../auth/types.js";
import type { RedisSettings } from "../config/redis-settings.js";
import { withDeadline } from "../deadline.js";
import type { RateLimitStore } from "../ratelimit/types.js";
import { guarded } from "./errors.js";
import { createMemoryAuthorizeStore } from "./memory/authorize-store.js";
import { createMemoryIdentityStore } from "./memory/identity-store.js";
import { createMemoryRateLimitStore } from "./memory/rate-limit-store.js";
import { createRedisAuthorizeStore } from "./redis/authorize-store.js";
import { createRedisClient, type RedisClient } from "./redis/client.js";
import { createRedisSessionStore, createRedisUserStore } from "./redis/identity-store.js";
import { createKeys } from "./redis/keys.js";
import { createRedisRateLimitStore } from "./redis/rate-limit-store.js";

export type Store = {
  kind: "redis" | "memory";
  users: UserStore;
  sessions: SessionStore;
  /** For the APIs: failures and slow answers surface as StoreUnavailableError. */
  limiter: RateLimitStore;
  /** For the check path, which puts its own REDIS_TIMEOUT_MS deadline on each call. */
  checks: { limiter: RateLimitStore; authorizer: AuthorizeStore };
  /** Whether the store answers within `timeoutMs`. */
  ping(timeoutMs: number): Promise<boolean>;
  close(): Promise<void>;
  /** The Redis connection, for the store's own events (up/down); absent on the memory store. */
  redis: RedisClient | undefined;
};

/** The public and admin APIs may wait longer on the store than a check. */
const apiTimeout = (checkTimeoutMs: number): number => Math.max(1_000, checkTimeoutMs * 10);

/**
 * A session store whose `create` gives up after `timeoutMs`, and then revokes the session should its
 * commands still run (a stalled Redis executes them once it resumes): a login that answered 503 must
 * leave no session behind, as no token for it was ever issued.
 */
function revokingLateSessions(sessions: SessionStore, timeoutMs: number): SessionStore {
  return {
    ...sessions,
    create(input, lifetimes) {
      let gaveUp = false;
      const created = sessions.create(input, lifetimes);
      created.then(
        (result) => {
          if (gaveUp && result !== "refused") {
            sessions.revoke(result.session.userId, result.session.sessionId).catch(() => undefined);
          }
        },
        () => undefined,
      );
      return withDeadline(created, timeoutMs).catch((error: unknown) => {
        gaveUp = true;
        throw error;
      });
    },
  };
}

export function createRedisStore(options: { redis: RedisClient; prefix: string; timeoutMs?: number }): Store {
  const { redis } = options;
  const timeoutMs = apiTimeout(options.timeoutMs ?? 100);
  const keys = createKeys(options.prefix);
  const limiter = createRedisRateLimitStore({ redis, keys });
  return {
    kind: "redis",
    users: guarded(createRedisUserStore({ redis, keys }), timeoutMs),
    sessions: guarded(revokingLateSessions(createRedisSessionStore({ redis, keys }), timeoutMs), timeoutMs),
    limiter: guarded(limiter, timeoutMs),
    checks: { limiter, authorizer: createRedisAuthorizeStore({ redis, keys }) },
    async ping(timeoutMs) {
      let timer: NodeJS.Timeout | undefined;
      const timeout = new Promise<boolean>((resolve) => {
        timer = setTimeout(() => resolve(false), timeoutMs);
      });
      const pong = redis.ping().then(
        (reply) => reply === "PONG",
        () => false,
      );
      const answer = await Promise.race([pong, timeout]);
      clearTimeout(timer);
      return answer;
    },
    async close() {
      await redis.quit().catch(() => redis.disconnect());
    },
    redis,
  };
}

export function createMemoryStore(): Store {
  const limiter = createMemoryRateLimitStore();
  const identity = createMemoryIdentityStore();
  return {
    kind: "memory",
    users: identity.users,
    sessions: identity.sessions,
    limiter,
    checks: { limiter, authorizer: createMemoryAuthorizeStore({ identity, limiter }) },
    ping: async () => true,
    async close() {
      limiter.close();
      identity.close();
    },
    redis: undefined,
  };
}

export function createStore(options: {
  redis: RedisSettings | undefined;
  timeoutMs: number;
  prefix: string;
}): Store {
  if (options.redis === undefined) return createMemoryStore();
  const redis = createRedisClient({
    settings: options.redis,
    connectTimeoutMs: Math.max(1_000, options.timeoutMs * 10),
  });
  return createRedisStore({ redis, prefix: options.prefix, timeoutMs: options.timeoutMs });
}
