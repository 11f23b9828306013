// Start-up's warnings about settings that tollgate runs with but should not: a variable it ignores,
// a Redis that drops keys by itself.
import type { Config } from "../config/env.js";
import type { Store } from "../store/store.js";
import type { Logger } from "./logger.js";

/** A variable that looks like a setting but is none, a typo most often: it is ignored, so say so. */
export function warnUnknownSettings(config: Config, logger: Logger): void {
  for (const { variable, closest, likelyTypo } of config.unknownSettings) {
    logger.warn(
      { event: "unknown_setting", variable, closest },
      likelyTypo
        ? `${variable} is not a tollgate setting and is ignored: did you mean ${closest}?`
        : `${variable} is not a tollgate setting and is ignored (the closest setting is ${closest})`,
    );
  }
}

/**
 * One warning per Redis data node that evicts keys at its maxmemory: what it drops is never
 * announced, and some of it is what a refusal rests on (docs/failure-modes.md, eviction).
 */
export async function warnEvictingNodes(store: Pick<Store, "evictingNodes">, logger: Logger): Promise<void> {
  for (const { node, policy, maxmemoryBytes } of await store.evictingNodes().catch(() => [])) {
    // volatile-* evicts only keys with an expiry (windows, lockouts, sessions); allkeys-* any key.
    const undone = policy.startsWith("allkeys")
      ? ", and users, blocks and deletions it drops come undone"
      : "";
    logger.warn(
      { event: "redis_evicts", node, policy, maxmemoryBytes },
      `Redis at ${node} evicts keys once full (maxmemory-policy ${policy}): windows and lockouts it ` +
        `drops let requests past their limits${undone}; set maxmemory-policy noeviction`,
    );
  }
}
