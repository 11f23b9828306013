// The composition of one store: Redis when REDIS_URL is set, otherwise the embedded memory store.
import type { Redis } from "ioredis";
import { createMemoryIdentityStore } from "../auth/memory-identity-store.js";
import { createRedisSessionStore, createRedisUserStore } from "../auth/redis-identity-store.js";
import type { AuthorizeStore, SessionStore, UserStore } from "../auth/types.js";
import { createMemoryAuthorizeStore } from "../authz/memory-authorize-store.js";
import { createRedisAuthorizeStore } from "../authz/redis-authorize-store.js";
import { createMemoryRateLimitStore } from "../ratelimit/memory-store.js";
import { createRedisRateLimitStore } from "../ratelimit/redis-store.js";
import type { RateLimitStore } from "../ratelimit/types.js";
import { guarded } from "./errors.js";
import { createKeys } from "./keys.js";
import { createRedisClient } from "./redis-client.js";

export type Store = {
  kind: "redis" | "memory";
  users: UserStore;
  sessions: SessionStore;
  limiter: RateLimitStore;
  authorizer: AuthorizeStore;
  /** Whether the store answers within `timeoutMs`. */
  ping(timeoutMs: number): Promise<boolean>;
  close(): Promise<void>;
  /** The Redis connection, for the store's own events (up/down); absent on the memory store. */
  redis: Redis | undefined;
};

export function createRedisStore(options: { redis: Redis; prefix: string }): Store {
  const { redis } = options;
  const keys = createKeys(options.prefix);
  return {
    kind: "redis",
    users: guarded(createRedisUserStore({ redis, keys })),
    sessions: guarded(createRedisSessionStore({ redis, keys })),
    limiter: guarded(createRedisRateLimitStore({ redis, keys })),
    // The check path handles store failures itself and stays free of the extra wrapper.
    authorizer: createRedisAuthorizeStore({ redis, keys }),
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
    authorizer: createMemoryAuthorizeStore({ identity, limiter }),
    ping: async () => true,
    async close() {
      limiter.close();
      identity.close();
    },
    redis: undefined,
  };
}

export function createStore(options: {
  redisUrl: string | undefined;
  timeoutMs: number;
  prefix: string;
}): Store {
  if (options.redisUrl === undefined) return createMemoryStore();
  const redis = createRedisClient({ url: options.redisUrl, commandTimeoutMs: options.timeoutMs });
  return createRedisStore({ redis, prefix: options.prefix });
}
