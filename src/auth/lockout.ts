// The per-username lockout: failed logins counted per name from any address, under LOGIN_LOCKOUT alone.
import type { Window } from "../config/rules.js";
import { type Layer, logRule, type RateLimitStore, usernameSubject } from "../ratelimit/types.js";

/** The category of a username's failed logins (its window's key: `{n:<hex>}:l:login_failed:0`). */
const LOCKOUT_CATEGORY = "login_failed";

export type Lockout = {
  /** ms until the name may try again (≥ 1000), or 0 while it has failures left. */
  retryAfterMs(username: string): Promise<number>;
  /** Counts one failed login of the name. */
  fail(username: string): Promise<void>;
  /** Forgets the name's failures: an operator's reset, a new password, a user re-enabled. */
  clear(username: string): Promise<void>;
};

type LockoutOptions = {
  /**
   * Failures allowed per window: a setting of its own, never the policy's per-address login rule,
   * so that raising that rule (many clients behind one NAT) never lifts the guard on passwords.
   */
  window: Window;
  limiter: RateLimitStore;
};

export function createLockout(options: LockoutOptions): Lockout {
  const { limiter } = options;
  const layer: Layer = {
    category: LOCKOUT_CATEGORY,
    rule: logRule(options.window.limit, options.window.windowMs),
  };
  return {
    async retryAfterMs(username) {
      const full = (await limiter.peek(usernameSubject(username), layer)).filter((w) => w.remaining === 0);
      if (full.length === 0) return 0;
      const freesAt = Math.max(...full.map((w) => w.resetAtMs));
      return Math.max(1000, freesAt - Date.now());
    },
    async fail(username) {
      await limiter.hit(usernameSubject(username), [layer]);
    },
    clear(username) {
      return limiter.reset(usernameSubject(username), [LOCKOUT_CATEGORY]);
    },
  };
}
