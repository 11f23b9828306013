// The check's store call on the memory stores: IP layer, session, tier and windows in one synchronous step.

import type { AuthorizeStore } from "../../ratelimit/authorize-port.js";
import { IP_LAYER, type Rule, userSubject, type Window } from "../../ratelimit/types.js";
import type { MemoryIdentity } from "./identity-store.js";
import type { MemoryRateLimitStore, SubjectLayer } from "./rate-limit-store.js";

export function createMemoryAuthorizeStore(options: {
  identity: MemoryIdentity;
  limiter: MemoryRateLimitStore;
}): AuthorizeStore {
  const { identity, limiter } = options;
  /** One Rule object per user's own windows, so that answers built from it are prepared once. */
  const ownRules = new WeakMap<readonly Window[], Rule>();
  const ownRule = (windows: readonly Window[], tierRule: Rule | undefined): Rule => {
    const algorithm = tierRule?.algorithm ?? "sliding-log";
    let rule = ownRules.get(windows);
    if (rule === undefined || rule.algorithm !== algorithm) {
      rule = { algorithm, windows };
      ownRules.set(windows, rule);
    }
    return rule;
  };
  return {
    async authorize({ userId, sessionId, category, rules, ip, idleMs, dryRun }) {
      const layers: SubjectLayer[] = [];
      if (ip !== undefined) {
        const shadow = ip.shadow === true;
        layers.push({ subject: ip.subject, category: IP_LAYER, rule: ip.rule, shadow });
        // The IP layer comes before identity: a full one refuses without looking at the session.
        // In shadow mode it refuses nothing, so the session and the user's layer decide as ever.
        if (!shadow) {
          const ipHit = limiter.hitNow(layers, true);
          if (!ipHit.allowed) return { kind: "ip_denied", hit: ipHit };
        }
      }
      const check = identity.touchNow(userId, sessionId, idleMs, !dryRun);
      if (check.kind !== "ok") return check;
      const tierRule = rules.get(check.tier);
      const own = check.limits[category];
      const rule = own === undefined ? tierRule : ownRule(own, tierRule);
      if (rule === undefined) return { kind: "unknown_tier", tier: check.tier };
      layers.push({ subject: userSubject(userId), category, rule });
      // Nothing runs between the session check and the count: both are synchronous.
      const hit = limiter.hitNow(layers, dryRun);
      return {
        kind: "ok",
        tier: check.tier,
        hit,
        ownRule: own === undefined ? undefined : rule,
        sessionExpiresAtMs: check.expiresAt,
      };
    },
  };
}
