// Users and sessions in process memory: the embedded default, with the Redis store's semantics.

import { newSessionId, newUserId } from "../../auth/ids.js";
import type { Session, SessionCheck, SessionStore, User, UserStore } from "../../auth/types.js";
import { canonicalUsername } from "../../auth/usernames.js";
import type { Clock, Window } from "../../ratelimit/types.js";

type StoredSession = Session & { idleDeadline: number };

/** A valid session's user, as the memory check reads it. */
export type TouchResult =
  | {
      kind: "ok";
      tier: string;
      expiresAt: number;
      limits: Readonly<Record<string, readonly Window[]>>;
    }
  | { kind: "no_session" }
  | { kind: "user_inactive" };

export type MemoryIdentity = {
  users: UserStore;
  sessions: SessionStore;
  /** The synchronous session check that the memory limiter reads in the same step as its count; renews unless `renew` is false. */
  touchNow(userId: string, sessionId: string, idleMs: number, renew?: boolean): TouchResult;
  close(): void;
};

export function createMemoryIdentityStore(
  options: { clock?: Clock; sweepIntervalMs?: number } = {},
): MemoryIdentity {
  const clock = options.clock ?? Date.now;
  const users = new Map<string, User>();
  /** By canonical username: every form of one name finds one user. */
  const idsByName = new Map<string, string>();
  /** Canonical usernames whose user was deleted (USERS_FILE does not bring them back). */
  const goneNames = new Set<string>();
  /** Per user, sessions in creation order (the index). */
  const sessions = new Map<string, Map<string, StoredSession>>();

  const alive = (s: StoredSession, now: number): boolean => s.expiresAt > now && s.idleDeadline > now;

  const userStore: UserStore = {
    async create(input) {
      const name = canonicalUsername(input.username);
      if (idsByName.has(name)) return "exists";
      const user: User = {
        id: input.id ?? newUserId(),
        username: input.username,
        tier: input.tier,
        passwordHash: input.passwordHash,
        createdAt: clock(),
        disabled: false,
        source: input.source ?? "admin",
        seed: input.seed,
        limits: {},
      };
      users.set(user.id, user);
      idsByName.set(name, user.id);
      goneNames.delete(name);
      return { ...user };
    },
    async get(userId) {
      const user = users.get(userId);
      return user === undefined ? undefined : { ...user };
    },
    async findByUsername(username) {
      const id = idsByName.get(canonicalUsername(username));
      return id === undefined ? undefined : userStore.get(id);
    },
    async update(userId, patch) {
      const user = users.get(userId);
      if (user === undefined) return false;
      if (patch.tier !== undefined) user.tier = patch.tier;
      if (patch.passwordHash !== undefined) {
        user.passwordHash = patch.passwordHash;
        // No session from before a new password outlives it (as on Redis, in the same step).
        sessions.delete(userId);
      }
      if (patch.disabled !== undefined) user.disabled = patch.disabled;
      if (patch.source !== undefined) user.source = patch.source;
      if (patch.seed !== undefined) user.seed = { ...patch.seed };
      if (patch.limits !== undefined) {
        const limits = { ...user.limits };
        for (const [category, windows] of Object.entries(patch.limits)) {
          if (windows === null) delete limits[category];
          else limits[category] = windows.map((w) => ({ ...w }));
        }
        user.limits = limits;
      }
      return true;
    },
    async remove(userId, options) {
      const user = users.get(userId);
      if (user === undefined) return false;
      users.delete(userId);
      // With its sessions: one a racing login created after the deletion revoked the others would
      // otherwise serve a new user given the same id (USERS_FILE's fixed ids).
      sessions.delete(userId);
      const name = canonicalUsername(user.username);
      if (idsByName.get(name) === userId) {
        idsByName.delete(name);
        if (options?.remember !== false) goneNames.add(name);
      }
      return true;
    },
    async wasRemoved(username) {
      return goneNames.has(canonicalUsername(username));
    },
    async list({ cursor, limit }) {
      const ids = [...users.keys()].filter((id) => cursor === undefined || id > cursor).sort();
      const page = ids.slice(0, limit);
      return {
        users: page.map((id) => ({ ...(users.get(id) as User) })),
        nextCursor: page.length === limit && ids.length > limit ? page[page.length - 1] : undefined,
      };
    },
    async any() {
      return users.size > 0;
    },
  };

  const touchNow = (userId: string, sessionId: string, idleMs: number, renew = true): TouchResult => {
    const now = clock();
    const own = sessions.get(userId);
    const session = own?.get(sessionId);
    if (session === undefined || !alive(session, now)) {
      if (renew) own?.delete(sessionId);
      return { kind: "no_session" };
    }
    const user = users.get(userId);
    if (user === undefined || user.disabled) return { kind: "user_inactive" };
    if (renew) {
      session.lastAccessed = now;
      session.idleDeadline = now + idleMs;
    }
    return { kind: "ok", tier: user.tier, expiresAt: session.expiresAt, limits: user.limits };
  };

  const sessionStore: SessionStore = {
    async create(input, lifetimes) {
      const now = clock();
      // Checked in the same synchronous step as the creation: no disable or password change between.
      const user = users.get(input.userId);
      if (user === undefined || user.disabled || user.passwordHash !== input.passwordHash) return "refused";
      let own = sessions.get(input.userId);
      if (own === undefined) {
        own = new Map();
        sessions.set(input.userId, own);
      }
      // Sessions that expired by themselves do not count towards the cap.
      for (const [sid, s] of own) if (!alive(s, now)) own.delete(sid);
      const evicted: string[] = [];
      for (const sid of own.keys()) {
        if (own.size - evicted.length < lifetimes.maxPerUser) break;
        evicted.push(sid);
      }
      for (const sid of evicted) own.delete(sid);
      const session: StoredSession = {
        userId: input.userId,
        deviceName: input.deviceName,
        ip: input.ip,
        userAgent: input.userAgent,
        sessionId: input.sessionId ?? newSessionId(),
        createdAt: now,
        lastAccessed: now,
        expiresAt: now + lifetimes.maxAgeMs,
        idleDeadline: now + lifetimes.idleMs,
      };
      own.set(session.sessionId, session);
      const { idleDeadline: _, ...plain } = session;
      return { session: plain, evicted };
    },
    async touch(userId, sessionId, idleMs): Promise<SessionCheck> {
      const check = touchNow(userId, sessionId, idleMs);
      return check.kind === "ok" ? { kind: "ok", tier: check.tier } : check;
    },
    async list(userId) {
      const now = clock();
      const own = sessions.get(userId);
      if (own === undefined) return [];
      const out: Session[] = [];
      for (const [sid, s] of own) {
        if (!alive(s, now)) own.delete(sid);
        else {
          const { idleDeadline: _, ...plain } = s;
          out.push(plain);
        }
      }
      return out;
    },
    async revoke(userId, sessionId) {
      return sessions.get(userId)?.delete(sessionId) ?? false;
    },
    async revokeAll(userId) {
      const now = clock();
      const own = [...(sessions.get(userId)?.values() ?? [])];
      sessions.delete(userId);
      return own.filter((s) => alive(s, now)).length;
    },
  };

  const sweep = (): void => {
    const now = clock();
    for (const [userId, own] of sessions) {
      for (const [sid, s] of own) if (!alive(s, now)) own.delete(sid);
      if (own.size === 0) sessions.delete(userId);
    }
  };
  const timer = setInterval(sweep, options.sweepIntervalMs ?? 30_000);
  timer.unref();

  return { users: userStore, sessions: sessionStore, touchNow, close: () => clearInterval(timer) };
}
