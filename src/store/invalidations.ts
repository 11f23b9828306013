// Invalidations: "this subject may be freer than you think", to every tollgate sharing the store.
import { type ApiKeyStore, keySubject, type SubjectStore } from "../auth/subjects.js";
import type { SessionStore, UserStore } from "../auth/types.js";
import type { LimiterPort } from "../ratelimit/limiter.js";
import { userSubject } from "../ratelimit/types.js";

/**
 * What can free a subject before its window does (an admin's reset, tier change, disable, own
 * limits, a revocation, a policy reload) is announced here; every process drops its cached
 * refusals of that subject. `"*"` drops them all.
 */
export type Invalidations = {
  publish(subject: string): void;
  /** `healthy` is false while announcements may be missed: the listener must not trust its cache. */
  subscribe(listener: { message(subject: string): void; health(healthy: boolean): void }): void;
  close(): Promise<void>;
};

/** One process: announcements reach its own listeners at once. */
export function createLocalInvalidations(): Invalidations {
  const listeners: { message(subject: string): void; health(healthy: boolean): void }[] = [];
  return {
    publish(subject) {
      for (const l of listeners) l.message(subject);
    },
    subscribe(listener) {
      listeners.push(listener);
      listener.health(true);
    },
    close: async () => {},
  };
}

/** The user store, announcing every change of a user (tier, disabled, password, own limits, removal). */
export function announcingUsers(users: UserStore, bus: Invalidations): UserStore {
  return {
    ...users,
    async update(userId, patch) {
      const changed = await users.update(userId, patch);
      bus.publish(userSubject(userId));
      return changed;
    },
    async remove(userId) {
      const removed = await users.remove(userId);
      bus.publish(userSubject(userId));
      return removed;
    },
  };
}

/** The session store, announcing every revocation (a revoked session must get 401, not a cached 429). */
export function announcingSessions(sessions: SessionStore, bus: Invalidations): SessionStore {
  return {
    ...sessions,
    async create(input, lifetimes) {
      const created = await sessions.create(input, lifetimes);
      if (created !== "refused" && created.evicted.length > 0) bus.publish(userSubject(input.userId));
      return created;
    },
    async revoke(userId, sessionId) {
      const revoked = await sessions.revoke(userId, sessionId);
      bus.publish(userSubject(userId));
      return revoked;
    },
    async revokeAll(userId) {
      const revoked = await sessions.revokeAll(userId);
      bus.publish(userSubject(userId));
      return revoked;
    },
  };
}

/** The limiter, announcing resets of a subject's windows. */
export function announcingLimiter(limiter: LimiterPort, bus: Invalidations): LimiterPort {
  return {
    limit: (request) => limiter.limit(request),
    async reset(subject, categories) {
      await limiter.reset(subject, categories);
      bus.publish(subject);
    },
  };
}

/** API keys, announcing every change and deletion: a revoked key must get 401 at once, not a cached 429. */
export function announcingApiKeys(keys: ApiKeyStore, bus: Invalidations): ApiKeyStore {
  return {
    ...keys,
    async update(id, patch) {
      const changed = await keys.update(id, patch);
      bus.publish(keySubject(id));
      return changed;
    },
    async remove(id) {
      const removed = await keys.remove(id);
      bus.publish(keySubject(id));
      return removed;
    },
  };
}

/** Provider subjects' profiles, announcing every change (a block, a tier, own limits). */
export function announcingSubjects(subjects: SubjectStore, bus: Invalidations): SubjectStore {
  return {
    ...subjects,
    async update(subject, patch) {
      await subjects.update(subject, patch);
      bus.publish(subject);
    },
  };
}
