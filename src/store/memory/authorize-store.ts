// The check's store call on the memory stores: session, tier and window in one synchronous step.

import type { AuthorizeStore } from "../../auth/types.js";
import type { RateLimitStore } from "../../ratelimit/types.js";
import type { MemoryIdentity } from "./identity-store.js";

export function createMemoryAuthorizeStore(options: {
  identity: MemoryIdentity;
  limiter: RateLimitStore;
}): AuthorizeStore {
  const { identity, limiter } = options;
  return {
    async authorize({ userId, sessionId, category, limits, idleMs }) {
      const check = identity.touchNow(userId, sessionId, idleMs);
      if (check.kind !== "ok") return check;
      const rule = limits.get(check.tier);
      if (rule === undefined) return { kind: "unknown_tier", tier: check.tier };
      // The memory limiter settles synchronously, so nothing runs between the session and the hit.
      const hit = await limiter.hit(`u:${userId}`, category, rule);
      return { kind: "ok", tier: check.tier, hit };
    },
  };
}
