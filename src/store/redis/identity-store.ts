// Users and sessions on Redis: hashes per user and per session (each session carrying what a check
// needs of its user, field v), and a per-user index of sessions.
import { newSessionId, newUserId } from "../../auth/ids.js";
import type { Session, SessionStore, User, UserPatch, UserStore } from "../../auth/types.js";
import type { RedisClient } from "./client.js";
import { ownLimits, windowsSpec } from "./codec.js";
import { identityScripts } from "./identity-scripts.js";
import type { Keys } from "./keys.js";
import { adoptAsTyped, claimName } from "./usernames.js";

function toUser(fields: Record<string, string>): User | undefined {
  if (fields.id === undefined || fields.username === undefined || fields.tier === undefined) return undefined;
  const source = fields.src === "file" || fields.src === "demo" ? fields.src : "admin";
  return {
    id: fields.id,
    username: fields.username,
    tier: fields.tier,
    passwordHash: fields.pw ?? "",
    createdAt: Number(fields.created ?? 0),
    disabled: fields.disabled === "1",
    source,
    seed:
      fields.seed_tier === undefined || fields.seed_pw === undefined
        ? undefined
        : { tier: fields.seed_tier, passwordHash: fields.seed_pw },
    limits: ownLimits(fields),
  };
}

/** The hash fields of a patch (or of a whole user); an empty value removes the field. */
function userFields(patch: UserPatch & Partial<Omit<User, "limits">>): Record<string, string> {
  const f: Record<string, string> = {};
  if (patch.id !== undefined) f.id = patch.id;
  if (patch.username !== undefined) f.username = patch.username;
  if (patch.tier !== undefined) f.tier = patch.tier;
  if (patch.passwordHash !== undefined) f.pw = patch.passwordHash;
  if (patch.createdAt !== undefined) f.created = String(patch.createdAt);
  if (patch.disabled !== undefined) f.disabled = patch.disabled ? "1" : "0";
  if (patch.source !== undefined) f.src = patch.source;
  if (patch.seed !== undefined) {
    f.seed_tier = patch.seed.tier;
    f.seed_pw = patch.seed.passwordHash;
  }
  for (const [category, windows] of Object.entries(patch.limits ?? {})) {
    f[`o:${category}`] = windows === null ? "" : windowsSpec(windows);
  }
  return f;
}

function toSession(userId: string, sessionId: string, f: Record<string, string>): Session | undefined {
  if (f.exp === undefined) return undefined;
  return {
    sessionId,
    userId,
    deviceName: f.dev ?? "",
    ip: f.ip ?? "",
    userAgent: f.ua ?? "",
    createdAt: Number(f.created),
    // The last renewal leads field v, in 13 digits (see lua/includes/session.lua's session_view); sessions
    // from before v have it in field last.
    lastAccessed: Number(f.v === undefined ? f.last : f.v.slice(0, 13)),
    expiresAt: Number(f.exp),
  };
}

export function createRedisUserStore(options: { redis: RedisClient; keys: Keys }): UserStore {
  const { redis, keys } = options;
  const marker = keys.usersMarker;

  const get = async (userId: string): Promise<User | undefined> =>
    toUser(await redis.hgetall(keys.user(userId)));

  const store: UserStore = {
    /**
     * Single-slot steps, each safe to fail: (1) the "users exist" marker, first, so that no user
     * ever exists without it; (2) the username claim, a lease, so that two creations of one name
     * cannot both succeed; (3) the id in the listing index, before the user exists, so that no user
     * is ever missing from the listing (which skips ids without a hash); (4) the user's hash; (5) the
     * claim made permanent, only if it is still ours (a lease that ran out while the steps were
     * slow may have gone to another creation). A failure after (2) leaves a lease that runs out,
     * and the name is free again.
     */
    async create(input) {
      const user: User = {
        id: input.id ?? newUserId(),
        username: input.username,
        tier: input.tier,
        passwordHash: input.passwordHash,
        createdAt: Date.now(),
        disabled: false,
        source: input.source ?? "admin",
        seed: input.seed,
        limits: {},
      };
      await redis.set(marker, "1");
      if (!(await claimName(options, input.username, user.id))) return "exists";
      await redis.zadd(keys.userIndex, 0, user.id);
      const { limits: _, ...fields } = user;
      await redis.hset(keys.user(user.id), userFields(fields));
      if ((await identityScripts(redis).nameConfirm(keys.username(input.username), user.id)) !== 1) {
        if (input.id === undefined) {
          await redis.del(keys.user(user.id));
          await redis.zrem(keys.userIndex, user.id);
        }
        return "exists";
      }
      // No longer a name an admin deleted (USERS_FILE leaves such names alone).
      await redis.del(keys.usernameGone(input.username));
      return user;
    },

    get,

    async findByUsername(username) {
      const id = await redis.get(keys.username(username));
      return id === null ? adoptAsTyped({ redis, keys, get }, username) : get(id);
    },

    async update(userId, patch) {
      const fields = userFields(patch);
      // Only an existing user is changed: HSET on a missing key would bring a deleted user back.
      const changed = await identityScripts(redis).userUpdate(
        keys.user(userId),
        keys.sessionIndex(userId),
        ...Object.entries(fields).flat(),
      );
      // Users from before the listing index existed join it on their first change.
      if (changed === 1) await redis.zadd(keys.userIndex, "NX", 0, userId);
      return changed === 1;
    },

    async remove(userId, options) {
      const user = await get(userId);
      if (user === undefined) return false;
      const remember = options?.remember !== false;
      // The deletion is remembered first, so that USERS_FILE never brings the user back even if a
      // later step fails (and the user, once its hash is gone, can no longer be deleted again).
      if (remember) await redis.set(keys.usernameGone(user.username), userId);
      // Then the user hash with its sessions, in one step: from then on no check, touch or login
      // accepts the user, and no session of a login that raced the deletion is left over.
      await identityScripts(redis).userDelete(keys.user(userId), keys.sessionIndex(userId));
      await redis.zrem(keys.userIndex, userId);
      await identityScripts(redis).usernameRelease(
        keys.username(user.username),
        keys.usernameGone(user.username),
        userId,
        remember ? 1 : 0,
      );
      return true;
    },

    async wasRemoved(username) {
      if ((await redis.exists(keys.usernameGone(username))) === 1) return true;
      // A deletion marked before usernames were canonical, under the name as USERS_FILE types it.
      const asTyped = keys.usernameGoneAsTyped(username);
      return asTyped !== keys.usernameGone(username) && (await redis.exists(asTyped)) === 1;
    },

    async list({ cursor, limit }) {
      const ids = await redis.zrangebylex(
        keys.userIndex,
        cursor === undefined ? "-" : `(${cursor}`,
        "+",
        "LIMIT",
        0,
        limit,
      );
      if (ids.length === 0) return { users: [], nextCursor: undefined };
      // One command per user, not a pipeline: each user hash is in its own slot on Redis Cluster.
      const replies = await Promise.all(ids.map((id) => redis.hgetall(keys.user(id))));
      const users: User[] = [];
      for (const fields of replies) {
        const user = toUser(fields);
        if (user !== undefined) users.push(user);
      }
      return { users, nextCursor: ids.length === limit ? ids[ids.length - 1] : undefined };
    },

    async any() {
      return (await redis.exists(marker)) === 1 || (await redis.zcard(keys.userIndex)) > 0;
    },
  };
  return store;
}

export function createRedisSessionStore(options: { redis: RedisClient; keys: Keys }): SessionStore {
  const { redis, keys } = options;

  const store: SessionStore = {
    async create(input, lifetimes) {
      // Listing drops the index entries of sessions that expired by themselves, so that the cap
      // counts live sessions only and never evicts a session in use for the sake of a dead one.
      await store.list(input.userId);
      const sessionId = input.sessionId ?? newSessionId();
      const [createdAt, ...evicted] = await identityScripts(redis).sessionCreate(
        keys.session(input.userId, sessionId),
        keys.sessionIndex(input.userId),
        keys.user(input.userId),
        sessionId,
        lifetimes.idleMs,
        lifetimes.maxAgeMs,
        lifetimes.maxPerUser,
        input.passwordHash,
        "dev",
        input.deviceName,
        "ip",
        input.ip,
        "ua",
        input.userAgent,
      );
      if (createdAt === -1) return "refused";
      const session: Session = {
        userId: input.userId,
        deviceName: input.deviceName,
        ip: input.ip,
        userAgent: input.userAgent,
        sessionId,
        createdAt,
        lastAccessed: createdAt,
        expiresAt: createdAt + lifetimes.maxAgeMs,
      };
      return { session, evicted };
    },

    async touch(userId, sessionId, idleMs) {
      const [status, tier] = await identityScripts(redis).sessionTouch(
        keys.session(userId, sessionId),
        keys.sessionIndex(userId),
        keys.user(userId),
        sessionId,
        idleMs,
        "",
      );
      if (status === 1 && tier !== undefined) return { kind: "ok", tier };
      return status === -1 ? { kind: "user_inactive" } : { kind: "no_session" };
    },

    async list(userId) {
      const index = keys.sessionIndex(userId);
      const sessionIds = await redis.zrange(index, 0, -1);
      if (sessionIds.length === 0) return [];
      const pipeline = redis.pipeline();
      for (const sid of sessionIds) pipeline.hgetall(keys.session(userId, sid));
      const replies = (await pipeline.exec()) ?? [];
      const now = Date.now();
      const sessions: Session[] = [];
      const gone: string[] = [];
      sessionIds.forEach((sid, i) => {
        const session = toSession(userId, sid, (replies[i]?.[1] ?? {}) as Record<string, string>);
        if (session === undefined || session.expiresAt <= now) gone.push(sid);
        else sessions.push(session);
      });
      // Sessions that expired by themselves leave their id in the index until someone looks.
      if (gone.length > 0) await redis.zrem(index, ...gone);
      return sessions;
    },

    async revoke(userId, sessionId) {
      const [[, removed] = []] = (await redis
        .multi()
        .zrem(keys.sessionIndex(userId), sessionId)
        .del(keys.session(userId, sessionId))
        .exec()) ?? [[]];
      return removed === 1;
    },

    async revokeAll(userId) {
      return identityScripts(redis).sessionsRevokeAll(keys.sessionIndex(userId));
    },
  };
  return store;
}
