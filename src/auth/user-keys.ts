// A user's API keys (those created with its user_id) follow the user: refused while the user is
// disabled, revoked whenever it is removed (the admin API, USERS_FILE, the demo users in
// production). A key that names a user acts for that user upstream (x-user-id), so offboarding the
// user must end the key too.
import type { Limiter } from "../ratelimit/limiter.js";
import { type ApiKey, type ApiKeyStore, keySubject } from "./subjects.js";

/** What revoking keys takes: the keys, and the limiter and categories whose windows a revoked key leaves. */
export type KeyTarget = {
  apiKeys: ApiKeyStore;
  limiter: Pick<Limiter, "reset">;
  categories: readonly string[];
};

/** Keys read per page of the listing. */
const PAGE = 1000;

/** Every key created for one of `userIds`, through the whole listing (an admin's action, never a check's). */
export async function keysOfUsers(apiKeys: ApiKeyStore, userIds: ReadonlySet<string>): Promise<ApiKey[]> {
  const found: ApiKey[] = [];
  let after: string | undefined;
  for (;;) {
    const page = await apiKeys.list(PAGE, after);
    const last = page.at(-1);
    if (last === undefined) return found;
    for (const key of page) if (key.userId !== undefined && userIds.has(key.userId)) found.push(key);
    after = last.id;
  }
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
export async function revokeKeys(target: KeyTarget, keys: readonly ApiKey[]): Promise<number> {
  let revoked = 0;
  for (const key of keys) {
    if (!(await target.apiKeys.remove(key.id))) continue;
    await target.limiter.reset(keySubject(key.id), target.categories);
    revoked += 1;
  }
  return revoked;
}

/** Revokes the user's keys and drops their windows; how many were revoked. */
export async function revokeUserKeys(target: KeyTarget, userId: string): Promise<number> {
  return revokeKeys(target, await keysOfUsers(target.apiKeys, new Set([userId])));
}
