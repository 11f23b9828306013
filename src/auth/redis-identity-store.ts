// Users and sessions on Redis: hashes per user and per session, a per-user index for revocation.
import { randomBytes } from "node:crypto";
import type { Keys } from "../store/keys.js";
import type { RedisClient } from "../store/redis-client.js";
import type { Session, SessionStore, User, UserStore } from "./types.js";

export const newUserId = (): string => `usr_${randomBytes(8).toString("hex")}`;
export const newSessionId = (): string => randomBytes(16).toString("base64url");

function toUser(fields: Record<string, string>): User | undefined {
  if (fields.id === undefined || fields.username === undefined || fields.tier === undefined) return undefined;
  return {
    id: fields.id,
    username: fields.username,
    tier: fields.tier,
    passwordHash: fields.pw ?? "",
    createdAt: Number(fields.created ?? 0),
    disabled: fields.disabled === "1",
  };
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
    lastAccessed: Number(f.last),
    expiresAt: Number(f.exp),
  };
}

export function createRedisUserStore(options: { redis: RedisClient; keys: Keys }): UserStore {
  const { redis, keys } = options;
  const marker = keys.usersMarker;

  const get = async (userId: string): Promise<User | undefined> =>
    toUser(await redis.hgetall(keys.user(userId)));

  const write = async (user: User): Promise<void> => {
    await redis.hset(keys.user(user.id), {
      id: user.id,
      username: user.username,
      tier: user.tier,
      pw: user.passwordHash,
      created: String(user.createdAt),
      disabled: user.disabled ? "1" : "0",
    });
  };

  /**
   * Claims `username` for `userId`. The name's index key and the user's hash carry different hash
   * tags, so on a Redis Cluster they live on different masters and no one command covers both: a
   * creation whose second step failed (or whose process died) leaves a name pointing at no user.
   * Such an abandoned claim is taken over with a compare-and-set, so that the name is never lost.
   */
  const claim = async (username: string, userId: string): Promise<boolean> => {
    const key = keys.username(username);
    if ((await redis.set(key, userId, "NX")) !== null) return true;
    const owner = await redis.get(key);
    if (owner === null) return (await redis.set(key, userId, "NX")) !== null;
    if (owner === userId) return true;
    if ((await redis.exists(keys.user(owner))) === 1) return false;
    return (await redis.nameTakeover(key, owner, userId)) === 1;
  };

  const store: UserStore = {
    /**
     * Single-slot steps, each safe to fail: (1) the "users exist" marker, first, so that no user
     * ever exists without it; (2) the username claim, so that two creations of one name cannot both
     * succeed; (3) the user's hash; (4) a check that the claim is still ours, since a claim whose
     * hash was not yet written looks abandoned to a concurrent creation, which may take it over.
     * A failure after (2) leaves an abandoned claim that the next creation of the name takes over.
     */
    async create(input) {
      const user: User = { ...input, id: input.id ?? newUserId(), createdAt: Date.now(), disabled: false };
      await redis.set(marker, "1");
      if (!(await claim(input.username, user.id))) return "exists";
      await write(user);
      if ((await redis.get(keys.username(input.username))) !== user.id) {
        if (input.id === undefined) await redis.del(keys.user(user.id));
        return "exists";
      }
      return user;
    },

    async upsert(input) {
      // Bounded: "exists" from create means another creation of the name won, which the next lookup finds.
      for (let attempt = 0; attempt < 5; attempt += 1) {
        const existing = await store.findByUsername(input.username);
        if (existing === undefined) {
          const created = await store.create(input);
          if (created !== "exists") return created;
          continue;
        }
        const user: User = { ...existing, tier: input.tier, passwordHash: input.passwordHash };
        await write(user);
        return user;
      }
      throw new Error("the username kept changing hands while it was being written");
    },

    get,

    async findByUsername(username) {
      const id = await redis.get(keys.username(username));
      return id === null ? undefined : get(id);
    },

    async setTier(userId, tier) {
      if (!(await redis.exists(keys.user(userId)))) return false;
      await redis.hset(keys.user(userId), "tier", tier);
      return true;
    },

    async setDisabled(userId, disabled) {
      if (!(await redis.exists(keys.user(userId)))) return false;
      await redis.hset(keys.user(userId), "disabled", disabled ? "1" : "0");
      return true;
    },

    async any() {
      return (await redis.exists(marker)) === 1;
    },
  };
  return store;
}

export function createRedisSessionStore(options: { redis: RedisClient; keys: Keys }): SessionStore {
  const { redis, keys } = options;

  /** Deletes session hashes; answers how many still existed (the sessions that were alive). */
  const deleteSessions = async (userId: string, sessionIds: readonly string[]): Promise<number> => {
    if (sessionIds.length === 0) return 0;
    return redis.del(...sessionIds.map((sid) => keys.session(userId, sid)));
  };

  const store: SessionStore = {
    async create(input, lifetimes) {
      // Listing drops the index entries of sessions that expired by themselves, so that the cap
      // counts live sessions only and never evicts a session in use for the sake of a dead one.
      await store.list(input.userId);
      const sessionId = newSessionId();
      const [createdAt, ...evicted] = await redis.sessionCreate(
        keys.session(input.userId, sessionId),
        keys.sessionIndex(input.userId),
        sessionId,
        lifetimes.idleMs,
        lifetimes.maxAgeMs,
        lifetimes.maxPerUser,
        "dev",
        input.deviceName,
        "ip",
        input.ip,
        "ua",
        input.userAgent,
      );
      await deleteSessions(input.userId, evicted);
      const session: Session = {
        ...input,
        sessionId,
        createdAt,
        lastAccessed: createdAt,
        expiresAt: createdAt + lifetimes.maxAgeMs,
      };
      return { session, evicted };
    },

    async touch(userId, sessionId, idleMs) {
      const [status, tier] = await redis.sessionTouch(
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
      const revoked = await redis.sessionsRevokeAll(keys.sessionIndex(userId));
      // Index entries of sessions that already expired are not devices that were logged out.
      return deleteSessions(userId, revoked);
    },
  };
  return store;
}
