// Deleting users, the one way every path does it (DELETE /admin/users, USERS_FILE no longer listing
// a user, the demo users at a production start): nothing of a user outlives it.
import { userSubject } from "../ratelimit/types.js";
import type { Lockout } from "./lockout.js";
import type { SessionStore, UserStore } from "./types.js";
import { type KeyTarget, removeWithKeys } from "./user-keys.js";

/** What a user leaves behind: sessions, API keys, rate-limit windows and its name's failed logins. */
export type RemovalTarget = KeyTarget & {
  users: Pick<UserStore, "remove">;
  sessions: Pick<SessionStore, "revokeAll">;
  lockout: Pick<Lockout, "clear">;
};

export type Removed = { userId: string; sessions: number; apiKeys: number };

/**
 * Removes the users with their sessions, API keys, windows and lockout; how many keys were revoked.
 * All of it goes before the user: a failure (a 503, a start-up that tries again) leaves the user for
 * the retry to find and finish, which a user already gone would refuse (404) or skip. A user's
 * windows would otherwise greet a new user given its id (USERS_FILE's fixed ids, the demo users'),
 * and its name's failures a new user given its name. A login that verified the password before
 * the deletion may still create a session after revokeAll: the user's removal takes that one too,
 * in the same step as the user. `removed` hears of each user once it is gone. `remember` (default
 * true): USERS_FILE does not bring the users back; false when it is USERS_FILE that drops them, so
 * that listing them again creates them again.
 */
export function removeUsers(
  target: RemovalTarget,
  users: readonly { id: string; username: string }[],
  removed: (done: Removed) => void = () => {},
  options: { remember?: boolean } = {},
): Promise<number> {
  return removeWithKeys(target, users, async (user, apiKeys) => {
    const sessions = await target.sessions.revokeAll(user.id);
    await target.limiter.reset(userSubject(user.id), target.categories);
    await target.lockout.clear(user.username);
    await target.users.remove(user.id, options);
    removed({ userId: user.id, sessions, apiKeys });
  });
}
