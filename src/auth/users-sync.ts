// Start-up reconciliation of the store with USERS_FILE, and the removal of demo users in production.
import type { Logger } from "../process/logger.js";
import type { Lockout } from "./lockout.js";
import { hashPassword, verifyPassword } from "./passwords.js";
import type { NameAdoption, NewUser, SessionStore, User, UserPatch, UserStore } from "./types.js";
import { type RemovalTarget, removeUsers } from "./user-removal.js";
import { canonicalUsername } from "./usernames.js";
import { DEMO_USER_IDS, demoUsers, loadUsers, type UsersFileEntry } from "./users-file.js";

/**
 * What USERS_FILE and the demo users' removal change: users, their sessions and keys, their windows,
 * and their names' failed-login lockouts, which they free when the admin API would (a new password,
 * a user created or deleted). A user removed here goes as DELETE /admin/users removes one.
 */
type FileTarget = RemovalTarget & {
  users: UserStore;
  sessions: SessionStore;
  lockout: Pick<Lockout, "clear">;
};

/** Every user, page by page through the listing (no SCAN or KEYS). */
export async function* allUsers(users: UserStore, pageSize = 200): AsyncGenerator<User> {
  let cursor: string | undefined;
  do {
    const page = await users.list({ cursor, limit: pageSize });
    yield* page.users;
    cursor = page.nextCursor;
  } while (cursor !== undefined);
}

/** Longer than a username claim's lease on Redis (10 s), the longest a name stays claimed by no user. */
const CLAIM_WAIT_MS = 15_000;

/**
 * Creates a file user. "exists" while no user has the name means that another creation holds the
 * name's claim (another process applying the same file, or one that died half-way and left a lease
 * that runs out): try again until that creation's user appears or its claim is gone.
 */
async function createFileUser(users: UserStore, input: NewUser): Promise<User | undefined> {
  const until = Date.now() + CLAIM_WAIT_MS;
  for (;;) {
    const created = await users.create(input);
    if (created !== "exists") return created;
    if ((await users.findByUsername(input.username)) !== undefined) return undefined;
    if (Date.now() > until) throw new Error(`USERS_FILE: the name of one user stayed claimed by no user`);
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
}

/** The file's password hash for an entry, and whether it changed since the file's last load. */
async function filePassword(entry: UsersFileEntry, user: User): Promise<{ hash: string; changed: boolean }> {
  const last = user.seed?.passwordHash ?? user.passwordHash;
  if (entry.passwordHash !== undefined)
    return { hash: entry.passwordHash, changed: entry.passwordHash !== last };
  const password = entry.password as string;
  if (await verifyPassword(password, last)) return { hash: last, changed: false };
  return { hash: await hashPassword(password), changed: true };
}

/**
 * Applies USERS_FILE to the store. Which source wins: a field the file changed since its last load
 * (or a user the file adds) takes the file's value; a field the file did not change keeps what the
 * admin API set, so a restart never undoes an admin change. A password the file changes ends every
 * session of that user and frees its name's lockout. A user the file no longer lists is deleted
 * as the admin API deletes one (its sessions, API keys, windows and lockout too); a user deleted
 * through the admin API is not brought back by the file (a warning says so).
 */
export async function syncUsersFile(target: FileTarget, entries: readonly UsersFileEntry[], logger: Logger) {
  const { users, sessions, lockout } = target;
  // By canonical name: the file may spell a name in another case than the store holds it.
  const listed = new Set(entries.map((e) => canonicalUsername(e.username)));
  let created = 0;
  for (const entry of entries) {
    const user = await users.findByUsername(entry.username);
    if (user === undefined) {
      if (await users.wasRemoved(entry.username)) {
        logger.warn(
          { event: "users_file_skipped" },
          "a USERS_FILE user was deleted through the admin API and is not recreated; remove it from the file",
        );
        continue;
      }
      const hash = entry.passwordHash ?? (await hashPassword(entry.password as string));
      const seed = { tier: entry.tier, passwordHash: hash };
      const { id, username, tier } = entry;
      const input = { ...(id === undefined ? {} : { id }), username, tier, passwordHash: hash, seed };
      const user = await createFileUser(users, { ...input, source: "file" });
      if (user !== undefined) {
        created += 1;
        // Guesses at the name before it had a user must not lock the new user out.
        await lockout.clear(user.username);
      }
      continue;
    }
    const password = await filePassword(entry, user);
    const patch: UserPatch = { source: "file", seed: { tier: entry.tier, passwordHash: password.hash } };
    if (user.seed?.tier !== entry.tier && user.tier !== entry.tier) patch.tier = entry.tier;
    if (password.changed) patch.passwordHash = password.hash;
    // Counted before the change, which deletes whatever sessions are left with it (UserStore.update).
    const revoked = password.changed ? await sessions.revokeAll(user.id) : 0;
    await users.update(user.id, patch);
    if (password.changed) {
      // Guesses at the old password say nothing about the new one: the user may log in at once.
      await lockout.clear(user.username);
      logger.info(
        { event: "password_changed", userId: user.id, revoked, by: "USERS_FILE" },
        "password changed by USERS_FILE; every session revoked",
      );
    }
    if (patch.tier !== undefined) {
      logger.info(
        { event: "tier_changed", userId: user.id, from: user.tier, to: entry.tier, by: "USERS_FILE" },
        "tier changed by USERS_FILE",
      );
    }
  }
  const gone: User[] = [];
  for await (const user of allUsers(users)) {
    if (user.source === "file" && !listed.has(canonicalUsername(user.username))) gone.push(user);
  }
  // Not remembered as an admin's deletion: the file may list the user again, and then it is created again.
  await removeUsers(
    target,
    gone,
    ({ userId, sessions: revoked, apiKeys }) => {
      logger.info(
        { event: "user_removed", userId, revoked, apiKeys, by: "USERS_FILE" },
        "user no longer in USERS_FILE",
      );
    },
    { remember: false },
  );
  logger.info(
    { event: "users_loaded", count: entries.length, created, removed: gone.length },
    "users loaded from USERS_FILE",
  );
}

/**
 * Creates the demo users that are missing (outside production) and logs how many are present: those
 * created now and those an earlier start created alike; one deleted through the admin API stays
 * deleted and is not counted.
 */
export async function seedDemoUsers(users: UserStore, logger: Logger): Promise<void> {
  const created = await loadUsers(users, demoUsers());
  const present: string[] = [];
  for (const user of demoUsers()) {
    if ((await users.get(user.id as string)) !== undefined) present.push(user.username);
  }
  const names = present.length > 1 ? `${present.slice(0, -1).join(", ")} and ${present.at(-1)}` : present[0];
  logger.info(
    { event: "users_loaded", count: present.length, created: created.length },
    present.length === 0
      ? "no demo users present (all were deleted through the admin API)"
      : `demo users ${names} present (their password is in the README; existing ones are left as they are)`,
  );
}

/**
 * Deletes the demo users (with their sessions, API keys, windows and lockouts) wherever they came
 * from: production never has them. Demo users always have their fixed ids, so no user listing is
 * needed; the key listing is read only when one of them is there. (Their sessions are refused
 * already: the demo ids are refused at every check in production.)
 */
export async function removeDemoUsers(store: FileTarget, logger: Logger): Promise<number> {
  const present: User[] = [];
  for (const id of DEMO_USER_IDS) {
    const user = await store.users.get(id);
    if (user !== undefined) present.push(user);
  }
  const apiKeys = await removeUsers(store, present);
  const removed = present.length;
  // A warning when some were found: someone ran tollgate outside production on this store.
  if (removed > 0) {
    logger.warn(
      { event: "demo_users_removed", count: removed, apiKeys },
      "production: demo users found in the store were deleted with their sessions and API keys",
    );
  } else {
    logger.info(
      { event: "demo_users_removed", count: removed },
      "production: no demo users in the store; they are refused at login and at the check",
    );
  }
  return removed;
}

/** Logs what giving stored users the canonical form of their names did, when it ran. */
export function logNameAdoption(adoption: NameAdoption, logger: Logger): void {
  if (!adoption.ran) return;
  logger.info(
    { event: "usernames_adopted", adopted: adoption.adopted, collisions: adoption.collisions.length },
    "users stored before canonical usernames now answer to every form of their name",
  );
  for (const { userId, heldBy } of adoption.collisions) {
    logger.warn(
      { event: "username_collision", userId, heldBy },
      "two stored users have one name once case and compatibility forms are set aside: the other keeps it, this one keeps its sessions but cannot log in by name until an admin deletes one of them",
    );
  }
}
