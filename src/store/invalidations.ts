// Invalidations: "this subject may be freer than you think", to every tollgate sharing the store.
import { type ApiKeyStore, keySubject, type SubjectStore } from "../auth/subjects.js";
import type { SessionStore, UserStore } from "../auth/types.js";
import type { LimiterPort } from "../ratelimit/limiter.js";
import { userSubject } from "../ratelimit/types.js";
import { StoreUnavailableError } from "./failure.js";

/** `healthy` is false while announcements may be missed: the listener must not trust its cache. */
export type InvalidationListener = { message(subject: string): void; health(healthy: boolean): void };

/**
 * What can free a subject before its window does (an admin's reset, tier change, disable, own
 * limits, a revocation, a policy reload) is announced here; every process drops its cached
 * refusals of that subject. `"*"` drops them all.
 */
export type Invalidations = {
  /**
   * Drops the subject's refusals here at once (before the first await), and settles once every
   * other instance listening dropped them too, or can no longer trust them; rejects when the
   * announcement could not be sent.
   */
  publish(subject: string): Promise<void>;
  subscribe(listener: InvalidationListener): void;
  close(): Promise<void>;
};

/** One process: announcements reach its own listeners at once. */
export function createLocalInvalidations(): Invalidations {
  const listeners: InvalidationListener[] = [];
  return {
    async publish(subject) {
      for (const l of listeners) l.message(subject);
    },
    subscribe(listener) {
      listeners.push(listener);
      listener.health(true);
    },
    close: async () => {},
  };
}

/**
 * Runs a change and announces `subject` however the change ends. A change that failed may have
 * been made all the same (a key deleted before the step after it failed, a reply lost on the way
 * back): an announcement too many only costs a cached refusal, one too few leaves a refusal cached
 * for a subject that is freer (a revoked key answered 429, not 401) until its window frees. A change
 * that succeeded answers once every instance has heard of it, so that the next request, wherever it
 * goes, is decided under the change; when its announcement could not be sent, it answers 503.
 */
async function announced<T>(bus: Invalidations, subject: string, change: () => Promise<T>): Promise<T> {
  let result: T;
  try {
    result = await change();
  } catch (error) {
    bus.publish(subject).catch(() => undefined);
    throw error;
  }
  try {
    await bus.publish(subject);
  } catch (error) {
    throw new StoreUnavailableError(error);
  }
  return result;
}

/** The user store, announcing every change of a user (tier, disabled, password, own limits, removal). */
export function announcingUsers(users: UserStore, bus: Invalidations): UserStore {
  return {
    ...users,
    update: (userId, patch) => announced(bus, userSubject(userId), () => users.update(userId, patch)),
    remove: (userId, options) => announced(bus, userSubject(userId), () => users.remove(userId, options)),
  };
}

/**
 * The session store, announcing every revocation, so that a revoked session gets 401 rather than a
 * cached 429 on every process from the revocation's answer on.
 */
export function announcingSessions(sessions: SessionStore, bus: Invalidations): SessionStore {
  return {
    ...sessions,
    async create(input, lifetimes) {
      let created: Awaited<ReturnType<SessionStore["create"]>>;
      try {
        created = await sessions.create(input, lifetimes);
      } catch (error) {
        // It may have run, evicting sessions, with its reply lost.
        bus.publish(userSubject(input.userId)).catch(() => undefined);
        throw error;
      }
      // The evicted sessions' tokens are refused 401 everywhere from the login's answer on. Not a
      // 503 when that fails: the session is made, and a cached refusal only ever refuses.
      if (created !== "refused" && created.evicted.length > 0) {
        await bus.publish(userSubject(input.userId)).catch(() => undefined);
      }
      return created;
    },
    revoke: (userId, sessionId) =>
      announced(bus, userSubject(userId), () => sessions.revoke(userId, sessionId)),
    revokeAll: (userId) => announced(bus, userSubject(userId), () => sessions.revokeAll(userId)),
  };
}

/** The limiter, announcing resets of a subject's windows. */
export function announcingLimiter(limiter: LimiterPort, bus: Invalidations): LimiterPort {
  return {
    limit: (request) => limiter.limit(request),
    reset: (subject, categories) => announced(bus, subject, () => limiter.reset(subject, categories)),
  };
}

/**
 * API keys, announcing every change and deletion: a revoked key gets 401, not a cached 429, on every
 * instance from the revocation's answer on (and never an allow: a cached refusal only refuses).
 */
export function announcingApiKeys(keys: ApiKeyStore, bus: Invalidations): ApiKeyStore {
  return {
    ...keys,
    update: (id, patch) => announced(bus, keySubject(id), () => keys.update(id, patch)),
    remove: (id) => announced(bus, keySubject(id), () => keys.remove(id)),
  };
}

/** Provider subjects' profiles, announcing every change (a block, a tier, own limits). */
export function announcingSubjects(subjects: SubjectStore, bus: Invalidations): SubjectStore {
  return {
    ...subjects,
    update: (subject, patch) => announced(bus, subject, () => subjects.update(subject, patch)),
  };
}
