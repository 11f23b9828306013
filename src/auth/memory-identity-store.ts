// Users and sessions in process memory: the embedded default, with the Redis store's semantics.
import type { Clock } from "../ratelimit/types.js";
import { newSessionId, newUserId } from "./redis-identity-store.js";
import type { Session, SessionCheck, SessionStore, User, UserStore } from "./types.js";

type StoredSession = Session & { idleDeadline: number };

export type MemoryIdentity = {
  users: UserStore;
  sessions: SessionStore;
  /** The synchronous session check that the memory authorize store builds on. */
  touchNow(userId: string, sessionId: string, idleMs: number): SessionCheck;
  close(): void;
};

export function createMemoryIdentityStore(
  options: { clock?: Clock; sweepIntervalMs?: number } = {},
): MemoryIdentity {
  const clock = options.clock ?? Date.now;
  const users = new Map<string, User>();
  const idsByName = new Map<string, string>();
  /** Per user, sessions in creation order (the index). */
  const sessions = new Map<string, Map<string, StoredSession>>();

  const alive = (s: StoredSession, now: number): boolean => s.expiresAt > now && s.idleDeadline > now;

  const userStore: UserStore = {
    async create(input) {
      if (idsByName.has(input.username)) return "exists";
      const user: User = { ...input, id: input.id ?? newUserId(), createdAt: clock(), disabled: false };
      users.set(user.id, user);
      idsByName.set(user.username, user.id);
      return user;
    },
    async upsert(input) {
      const id = idsByName.get(input.username);
      const existing = id === undefined ? undefined : users.get(id);
      if (existing === undefined) return (await userStore.create(input)) as User;
      existing.tier = input.tier;
      existing.passwordHash = input.passwordHash;
      return { ...existing };
    },
    async get(userId) {
      const user = users.get(userId);
      return user === undefined ? undefined : { ...user };
    },
    async findByUsername(username) {
      const id = idsByName.get(username);
      return id === undefined ? undefined : userStore.get(id);
    },
    async setTier(userId, tier) {
      const user = users.get(userId);
      if (user !== undefined) user.tier = tier;
      return user !== undefined;
    },
    async setDisabled(userId, disabled) {
      const user = users.get(userId);
      if (user !== undefined) user.disabled = disabled;
      return user !== undefined;
    },
    async any() {
      return users.size > 0;
    },
  };

  const touchNow = (userId: string, sessionId: string, idleMs: number): SessionCheck => {
    const now = clock();
    const own = sessions.get(userId);
    const session = own?.get(sessionId);
    if (session === undefined || !alive(session, now)) {
      own?.delete(sessionId);
      return { kind: "no_session" };
    }
    const user = users.get(userId);
    if (user === undefined || user.disabled) return { kind: "user_inactive" };
    session.lastAccessed = now;
    session.idleDeadline = now + idleMs;
    return { kind: "ok", tier: user.tier };
  };

  const sessionStore: SessionStore = {
    async create(input, lifetimes) {
      const now = clock();
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
        ...input,
        sessionId: newSessionId(),
        createdAt: now,
        lastAccessed: now,
        expiresAt: now + lifetimes.maxAgeMs,
        idleDeadline: now + lifetimes.idleMs,
      };
      own.set(session.sessionId, session);
      const { idleDeadline: _, ...plain } = session;
      return { session: plain, evicted };
    },
    async touch(userId, sessionId, idleMs) {
      return touchNow(userId, sessionId, idleMs);
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
