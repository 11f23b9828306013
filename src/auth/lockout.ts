// The per-username lockout: failed logins counted per name from any address, under LOGIN_LOCKOUT alone.
import type { Window } from "../config/rules.js";
import type { Limiter } from "../ratelimit/limiter.js";
import { type Layer, logRule, usernameSubject } from "../ratelimit/types.js";

/** The category of a username's failed logins (its window's key: `{n:<hex>}:l:login_failed:0`). */
const LOCKOUT_CATEGORY = "login_failed";

/** The shortest Retry-After of a locked name: never "try again now" to a name that is locked. */
const MIN_RETRY_AFTER_MS = 1000;

export type Lockout = {
  /**
   * Counts one attempt of the name as a failure before its password is checked, in one atomic step
   * of the store (so that concurrent attempts through any number of processes cannot all see one
   * failure left): 0 when it was counted and may go on, or the ms until the name may try again
   * (≥ 1000) when its failures already fill the window, and then nothing is counted.
   */
  attempt(username: string): Promise<number>;
  /**
   * Forgets the name's failures: a right password (its own counted attempt with them), an
   * operator's reset, a new password, a user re-enabled.
   */
  clear(username: string): Promise<void>;
};

type LockoutOptions = {
  /**
   * Failures allowed per window: a setting of its own, never the policy's per-address login rule,
   * so that raising that rule (many clients behind one NAT) never lifts the guard on passwords.
   */
  window: Window;
  limiter: Pick<Limiter, "hit" | "reset">;
};

export function createLockout(options: LockoutOptions): Lockout {
  const { limiter } = options;
  const layer: Layer = {
    category: LOCKOUT_CATEGORY,
    rule: logRule(options.window.limit, options.window.windowMs),
  };
  return {
    async attempt(username) {
      const hit = await limiter.hit(usernameSubject(username), [layer]);
      return hit.allowed ? 0 : Math.max(MIN_RETRY_AFTER_MS, hit.retryAfterMs);
    },
    clear(username) {
      return limiter.reset(usernameSubject(username), [LOCKOUT_CATEGORY]);
    },
  };
}
