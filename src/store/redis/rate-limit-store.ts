// The sliding window on Redis: one atomic Lua script call per hit, time from Redis TIME.
import { randomBytes } from "node:crypto";
import {
  type Clock,
  hitResult,
  type RateLimitStore,
  type Rule,
  type WindowState,
} from "../../ratelimit/types.js";
import type { RedisClient } from "./client.js";
import type { Keys } from "./keys.js";

/** Request ids unique across processes: a counter plus a random per-process suffix, kept short. */
export function createMemberIds(): () => string {
  const instance = randomBytes(4).readUInt32BE().toString(36);
  let counter = 0;
  return () => {
    counter += 1;
    return `${counter.toString(36)}.${instance}`;
  };
}

export type RedisRateLimitStoreOptions = {
  redis: RedisClient;
  keys: Keys;
  /** Tests only: a pinned clock in ms instead of Redis TIME. */
  clock?: Clock;
};

export function createRedisRateLimitStore(options: RedisRateLimitStoreOptions): RateLimitStore {
  const { redis, keys, clock } = options;
  const nextMember = createMemberIds();
  const nowArg = (): string => (clock === undefined ? "" : String(Math.round(clock() * 1000)));

  return {
    async hit(subject, category, rule: Rule) {
      const [allowed, used, oldestUs, nowUs, freeAtUs] = await redis.windowHit(
        keys.window(subject, category),
        rule.limit,
        rule.windowMs * 1000,
        nextMember(),
        nowArg(),
      );
      return hitResult({
        allowed: allowed === 1,
        rule,
        used,
        oldestMs: oldestUs / 1000,
        freeAtMs: freeAtUs / 1000,
        nowMs: nowUs / 1000,
      });
    },

    async peek(subject, category, rule): Promise<WindowState> {
      const [used, oldestUs, nowUs] = await redis.windowPeek(
        keys.window(subject, category),
        rule.windowMs * 1000,
        nowArg(),
      );
      const { limit, remaining, resetAtMs } = hitResult({
        allowed: true,
        rule,
        used,
        oldestMs: oldestUs / 1000,
        freeAtMs: oldestUs / 1000,
        nowMs: nowUs / 1000,
      });
      return { limit, used, remaining, resetAtMs };
    },

    async reset(subject, categories) {
      if (categories.length === 0) return;
      await redis.del(...categories.map((c) => keys.window(subject, c)));
    },
  };
}
