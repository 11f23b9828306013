// A user's API keys (those created with its user_id) follow the user: refused while the user is
// disabled, revoked whenever it is removed (the admin API, USERS_FILE, the demo users in
// production). A key that names a user acts for that user upstream (x-user-id), so offboarding the
// user must end the key too.
import type { Logger } from "../process/logger.js";
import type { Limiter } from "../ratelimit/limiter.js";
import { type ApiKey, type ApiKeyStore, keySubject } from "./subjects.js";
import type { UserStore } from "./types.js";

/** What revoking keys takes: the keys, and the limiter and categories whose windows a revoked key leaves. */
export type KeyTarget = {
  apiKeys: ApiKeyStore;
  limiter: Pick<Limiter, "reset">;
  categories: readonly string[];
};

/** Keys read per page of the listing. */
const PAGE = 1000;

/** Every key, page by page through the listing (an admin's action or a start's, never a check's). */
async function* allKeys(apiKeys: ApiKeyStore): AsyncGenerator<ApiKey> {
  let after: string | undefined;
  do {
    const page = await apiKeys.list(PAGE, after);
    yield* page.keys;
    after = page.next;
  } while (after !== undefined);
}

/** Every key created for one of `userIds`. */
async function keysOfUsers(apiKeys: ApiKeyStore, userIds: ReadonlySet<string>): Promise<ApiKey[]> {
  const found: ApiKey[] = [];
  for await (const key of allKeys(apiKeys)) {
    if (key.userId !== undefined && userIds.has(key.userId)) found.push(key);
  }
  return found;
}

/** Blocks (or unblocks) the user's keys; how many changed. */
export async function blockUserKeys(apiKeys: ApiKeyStore, userId: string, blocked: boolean): Promise<number> {
  let changed = 0;
  for (const key of await keysOfUsers(apiKeys, new Set([userId]))) {
    if (key.blocked === blocked) continue;
    if (await apiKeys.update(key.id, { blocked })) changed += 1;
  }
  return changed;
}

/** Revokes these keys and drops their windows; how many were still there to revoke. */
async function revokeKeys(target: KeyTarget, keys: readonly ApiKey[]): Promise<number> {
  let revoked = 0;
  for (const key of keys) {
    if (!(await target.apiKeys.remove(key.id))) continue;
    await target.limiter.reset(keySubject(key.id), target.categories);
    revoked += 1;
  }
  return revoked;
}

/**
 * Removes users with the keys that act for them; how many keys were revoked. Each user's keys go
 * before `remove` deletes the user, so that a failure (a 503, a start-up that tries again) leaves
 * the user there for the retry to find, never keys acting for a user that is gone. The keys are
 * looked for once more after the users went: a key created meanwhile, whose creation checked its
 * user before the user went (creation checks again after storing the key, so either it sees the
 * user gone or this pass sees the key). Two passes over the key listing, however many users go.
 */
export async function removeWithKeys<U extends { id: string }>(
  target: KeyTarget,
  users: readonly U[],
  remove: (user: U, apiKeys: number) => Promise<unknown>,
): Promise<number> {
  if (users.length === 0) return 0;
  const ids = new Set(users.map((u) => u.id));
  const before = await keysOfUsers(target.apiKeys, ids);
  let revoked = 0;
  for (const user of users) {
    const apiKeys = await revokeKeys(
      target,
      before.filter((k) => k.userId === user.id),
    );
    revoked += apiKeys;
    await remove(user, apiKeys);
  }
  return revoked + (await revokeKeys(target, await keysOfUsers(target.apiKeys, ids)));
}

/**
 * Revokes the keys whose user is gone: builds before every deletion revoked its user's keys left
 * them acting for a user that no longer exists (docs/upgrading.md). Run once per start, after the
 * users are settled; a key is revoked only when its user is read and found missing, never on a
 * failed read. The keys revoked.
 */
export async function revokeOrphanKeys(
  target: KeyTarget & { users: Pick<UserStore, "get"> },
): Promise<ApiKey[]> {
  const exists = new Map<string, boolean>();
  const orphans: ApiKey[] = [];
  for await (const key of allKeys(target.apiKeys)) {
    if (key.userId === undefined) continue;
    let known = exists.get(key.userId);
    if (known === undefined) {
      known = (await target.users.get(key.userId)) !== undefined;
      exists.set(key.userId, known);
    }
    if (!known) orphans.push(key);
  }
  await revokeKeys(target, orphans);
  return orphans;
}

/** revokeOrphanKeys, its outcome logged: a warning when it revoked keys or could not look. */
export async function sweepOrphanKeys(
  target: KeyTarget & { users: Pick<UserStore, "get"> },
  logger: Logger,
): Promise<void> {
  try {
    const revoked = await revokeOrphanKeys(target);
    if (revoked.length === 0) return;
    logger.warn(
      { event: "api_keys_orphaned", count: revoked.length, ids: revoked.slice(0, 20).map((k) => k.id) },
      "API keys whose user was gone (deleted by an earlier build) were revoked",
    );
  } catch (error) {
    logger.warn(
      { event: "api_keys_orphaned_failed", err: (error as Error).message },
      "looking for API keys of deleted users failed; the next start looks again",
    );
  }
}
