// The check's one Redis call: session validity, the user's current tier and the window, atomically.
import type { AuthorizeStore, TierLimits } from "../../auth/types.js";
import { hitResult } from "../../ratelimit/types.js";
import type { RedisClient } from "./client.js";
import type { Keys } from "./keys.js";
import { createMemberIds } from "./rate-limit-store.js";

export function createRedisAuthorizeStore(options: { redis: RedisClient; keys: Keys }): AuthorizeStore {
  const { redis, keys } = options;
  const nextMember = createMemberIds();
  // The script's limit argument for each category's table, built once: one string, not 3 per tier.
  const specs = new WeakMap<TierLimits, string>();
  const limitSpec = (limits: TierLimits): string => {
    let spec = specs.get(limits);
    if (spec === undefined) {
      spec = [...limits].map(([tier, rule]) => `;${tier}=${rule.limit}/${rule.windowMs * 1000}`).join("");
      specs.set(limits, spec);
    }
    return spec;
  };

  return {
    async authorize({ userId, sessionId, category, limits, idleMs }) {
      const reply = await redis.authorize(
        keys.session(userId, sessionId),
        keys.sessionIndex(userId),
        keys.user(userId),
        keys.window(`u:${userId}`, category),
        sessionId,
        idleMs,
        nextMember(),
        "",
        limitSpec(limits),
      );
      const status = reply[0] as number;
      if (status === -1) return { kind: "no_session" };
      if (status === -2) return { kind: "user_inactive" };
      if (status === -3) return { kind: "unknown_tier", tier: String(reply[1]) };
      const [allowed, used, oldestUs, nowUs, freeAtUs, tier, limit, windowUs] = reply as [
        number,
        number,
        number,
        number,
        number,
        string,
        number,
        number,
      ];
      const hit = hitResult({
        allowed: allowed === 1,
        rule: { limit, windowMs: windowUs / 1000 },
        used,
        oldestMs: oldestUs / 1000,
        freeAtMs: freeAtUs / 1000,
        nowMs: nowUs / 1000,
      });
      return { kind: "ok", tier, hit };
    },
  };
}
