// A user's API keys (those created with its user_id) follow the user: refused while the user is
// disabled, revoked when it is deleted. A key that names a user acts for that user upstream
// (x-user-id), so offboarding the user must end the key too.
import type { ApiKey } from "../auth/subjects.js";
import { keySubject } from "../auth/subjects.js";
import type { ApiStore } from "./api-store.js";

/** Keys read per page of the listing. */
const PAGE = 1000;

/** Every key created for `userId`, through the whole listing (an admin's action, never a check's). */
async function keysOf(store: ApiStore, userId: string): Promise<ApiKey[]> {
  const found: ApiKey[] = [];
  let after: string | undefined;
  for (;;) {
    const page = await store.apiKeys.list(PAGE, after);
    const last = page.at(-1);
    if (last === undefined) return found;
    for (const key of page) if (key.userId === userId) found.push(key);
    after = last.id;
  }
}

/** Blocks (or unblocks) the user's keys; how many changed. */
export async function blockUserKeys(store: ApiStore, userId: string, blocked: boolean): Promise<number> {
  let changed = 0;
  for (const key of await keysOf(store, userId)) {
    if (key.blocked === blocked) continue;
    if (await store.apiKeys.update(key.id, { blocked })) changed += 1;
  }
  return changed;
}

/** Revokes the user's keys and drops their windows; how many were revoked. */
export async function revokeUserKeys(
  store: ApiStore,
  userId: string,
  categories: readonly string[],
): Promise<number> {
  let revoked = 0;
  for (const key of await keysOf(store, userId)) {
    if (!(await store.apiKeys.remove(key.id))) continue;
    await store.limiter.reset(keySubject(key.id), categories);
    revoked += 1;
  }
  return revoked;
}
