// The limiter port as the tests drive it: each store's limiter with the port's `hit` and `peek`, and
// a user's check as one call (the session read and the count), answered as the decision reads it.
import { userAnswer } from "../../src/check/store-call.js";
import type { UserAnswer } from "../../src/check/types.js";
import type { Rule, TierRules } from "../../src/config/rules.js";
import { createLimiter, type Limiter, type LimiterPort } from "../../src/ratelimit/limiter.js";
import { type Clock, IP_LAYER, type Subject } from "../../src/ratelimit/types.js";
import type { MemoryIdentity } from "../../src/store/memory/identity-store.js";
import { createMemoryLimiter, type MemoryLimiter } from "../../src/store/memory/limiter.js";
import type { RedisClient } from "../../src/store/redis/client.js";
import type { Keys } from "../../src/store/redis/keys.js";
import { createRedisLimiter } from "../../src/store/redis/limiter.js";

export type TestMemoryLimiter = Limiter & Pick<MemoryLimiter, "sweep" | "size" | "close">;

export function memoryLimiter(
  options: { clock?: Clock; sweepIntervalMs?: number; identity?: MemoryIdentity; maxEntries?: number } = {},
): TestMemoryLimiter {
  const port = createMemoryLimiter(options);
  return { ...createLimiter(port), sweep: port.sweep, size: port.size, close: port.close };
}

export const redisLimiter = (options: { redis: RedisClient; keys: Keys; clock?: Clock }): Limiter =>
  createLimiter(createRedisLimiter(options));

/** A user's check: the IP layer when given, the session, the user's tier and layer, in one call. */
export type UserCheck = {
  userId: string;
  sessionId: string;
  category: string;
  rules: TierRules;
  ip: { subject: Subject; rule: Rule; shadow?: boolean } | undefined;
  idleMs: number;
  dryRun: boolean;
};

export function userChecks(limiter: LimiterPort): { authorize(check: UserCheck): Promise<UserAnswer> } {
  return {
    async authorize({ userId, sessionId, category, rules, ip, idleMs, dryRun }) {
      const layers =
        ip === undefined
          ? []
          : [{ subject: ip.subject, category: IP_LAYER, rule: ip.rule, shadow: ip.shadow }];
      const result = await limiter.limit({
        layers,
        identity: { userId, sessionId, idleMs, category, rules },
        dryRun,
      });
      return userAnswer(result, ip?.shadow === true);
    },
  };
}
