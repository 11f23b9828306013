// Username claims on Redis, by canonical name, and the adoption of names stored before they were canonical.
import type { NameAdoption, User, UserStore } from "../../auth/types.js";
import type { RedisClient } from "./client.js";
import { identityScripts } from "./identity-scripts.js";
import type { Keys } from "./keys.js";

type Names = { redis: RedisClient; keys: Keys };

/**
 * How long a creation's claim on a username holds before it is confirmed: far above a creation's
 * few round trips (even through a failover), short enough that a name whose creation failed is
 * free again soon.
 */
const CLAIM_LEASE_MS = 10_000;

/**
 * Claims `username` (its canonical form) for `userId`, until nameConfirm makes the claim permanent.
 * The name's index key and the user's hash carry different hash tags, so on a Redis Cluster they
 * live on different masters and no one command covers both. The claim is therefore a lease
 * (CLAIM_LEASE_MS) until the creation confirms it: a creation that fails or dies half-way frees the
 * name by itself, and a claim in progress is never taken for an abandoned one. A permanent claim
 * pointing at no user (a deletion that failed half-way) is taken over with a compare-and-set, so
 * that the name is never lost.
 */
export async function claimName({ redis, keys }: Names, username: string, userId: string): Promise<boolean> {
  const key = keys.username(username);
  const [status, owner] = await identityScripts(redis).nameClaim(key, userId, CLAIM_LEASE_MS);
  if (status === 1) return true;
  if (status === 0 || owner === undefined) return false;
  if ((await redis.exists(keys.user(owner))) === 1) return false;
  return (await identityScripts(redis).nameTakeover(key, owner, userId, CLAIM_LEASE_MS)) === 1;
}

/** Makes `user`'s canonical name its own for good; false when another user holds it. */
async function adopt(names: Names, user: User): Promise<boolean> {
  return (
    (await claimName(names, user.username, user.id)) &&
    (await identityScripts(names.redis).nameConfirm(names.keys.username(user.username), user.id)) === 1
  );
}

/**
 * A user stored before canonical usernames whom the start-up adoption missed (an older instance
 * stored it since, during a rolling upgrade): found by the name exactly as typed, and given its
 * canonical name on the way, unless another user took that meanwhile (who then wins).
 */
export async function adoptAsTyped(
  names: Names & { get(userId: string): Promise<User | undefined> },
  username: string,
): Promise<User | undefined> {
  const { redis, keys } = names;
  const asTyped = keys.usernameAsTyped(username);
  const canonical = keys.username(username);
  if (asTyped === canonical) return undefined;
  const id = await redis.get(asTyped);
  const user = id === null ? undefined : await names.get(id);
  if (user === undefined || user.username !== username) return undefined;
  if (await adopt(names, user)) return user;
  const holder = await redis.get(canonical);
  return holder === null ? undefined : names.get(holder);
}

/** The marker's value once every stored user answers to the canonical form of its name. */
const CANONICAL_NAMES = "canonical-1";
const PAGE = 200;

/**
 * Before canonical usernames, a name was keyed exactly as typed: "Alice" under `{n:<hex "Alice">}`,
 * which a lookup of "ALICE" (keyed by "alice") misses, and which would not stop the creation of
 * "alice". This claims each listed user's canonical key, in user-id order, unless another user holds
 * it already: that one keeps the name (two stored users whose names are one once canonical are
 * reported, never merged). The old keys stay, read only by adoptAsTyped. Safe on several instances at
 * once (claims are compare-and-set, in one order); a pass that fails half-way runs again at the
 * next start, as the marker is set last.
 */
export async function adoptCanonicalNames(names: Names & { users: UserStore }): Promise<NameAdoption> {
  const { redis, keys, users } = names;
  if ((await redis.get(keys.namesMarker)) === CANONICAL_NAMES) {
    return { ran: false, adopted: 0, collisions: [] };
  }
  let adopted = 0;
  const collisions: NameAdoption["collisions"] = [];
  let cursor: string | undefined;
  do {
    const page = await users.list({ cursor, limit: PAGE });
    for (const user of page.users) {
      const key = keys.username(user.username);
      if ((await redis.get(key)) === user.id) continue;
      if (await adopt(names, user)) {
        adopted += 1;
        continue;
      }
      const heldBy = await redis.get(key);
      if (heldBy !== null && heldBy !== user.id) collisions.push({ userId: user.id, heldBy });
    }
    cursor = page.nextCursor;
  } while (cursor !== undefined);
  await redis.set(keys.namesMarker, CANONICAL_NAMES);
  return { ran: true, adopted, collisions };
}
