// The composition of one store: Redis (one server, a Cluster or Sentinel) when configured, otherwise the embedded memory store.

import { newSessionId } from "../auth/ids.js";
import type { ApiKeyStore, SubjectStore } from "../auth/subjects.js";
import type { NameAdoption, SessionStore, UserStore } from "../auth/types.js";
import type { RedisSettings } from "../config/redis-settings.js";
import { createLimiter, type Limiter, type LimiterPort, Withdrawal } from "../ratelimit/limiter.js";
import { guarded, storeTimeouts, withDeadline } from "./failure.js";
import {
  announcingApiKeys,
  announcingLimiter,
  announcingSessions,
  announcingSubjects,
  announcingUsers,
  createLocalInvalidations,
  type Invalidations,
} from "./invalidations.js";
import { createMemoryIdentityStore } from "./memory/identity-store.js";
import { createMemoryLimiter } from "./memory/limiter.js";
import { createMemoryProfiles } from "./memory/profile-store.js";
import { withBacklogBound } from "./redis/backlog.js";
import { createRedisClient, type RedisClient } from "./redis/client.js";
import { createRedisSessionStore, createRedisUserStore } from "./redis/identity-store.js";
import { createRedisInvalidations } from "./redis/invalidations.js";
import { createKeys } from "./redis/keys.js";
import { createRedisLimiter } from "./redis/limiter.js";
import { createRedisApiKeyStore, createRedisSubjectStore } from "./redis/profile-store.js";
import { clearError, refusedSetting } from "./redis/refusals.js";
import { type EvictingNode, evictingNodes, scriptsPermitted } from "./redis/server-checks.js";
import { adoptCanonicalNames } from "./redis/usernames.js";
import { type WatchdogTimings, watchConnections } from "./redis/watchdog.js";

export type Store = {
  kind: "redis" | "memory";
  users: UserStore;
  sessions: SessionStore;
  /** API keys (hashes only) and provider subjects' profiles, read by the check in its one store call. */
  apiKeys: ApiKeyStore;
  subjects: SubjectStore;
  /** For the APIs (users, sessions and this limiter): failures and slow answers surface as StoreUnavailableError. */
  limiter: Limiter;
  /**
   * For the check path: the raw limiter, without the APIs' deadline or announcements; the checker
   * puts its own REDIS_TIMEOUT_MS deadline on each call and degrades per FAILURE_MODE.
   */
  unguarded: { limiter: Limiter };
  /** Announcements of subjects that may be freer than a cached refusal says. */
  invalidations: Invalidations;
  /** At start-up: gives users stored before canonical usernames their canonical name (Redis; once per store). */
  adoptCanonicalNames(): Promise<NameAdoption>;
  /** Whether the store answers within `timeoutMs`. */
  ping(timeoutMs: number): Promise<boolean>;
  /** Whether the first connection is up within `timeoutMs` (commands fail at once until it is). */
  connected(timeoutMs: number): Promise<boolean>;
  /** Failed (re)connections, for the log; never called on the memory store. */
  onConnectionError(listener: (error: Error) => void): void;
  /**
   * A setting the server refused while connecting (REDIS_URL's database, an unknown Sentinel
   * master), as a problem naming it: start-up stops on it rather than run on the wrong data.
   */
  refusedSetting(): string | undefined;
  /** Rejects while Redis refuses tollgate's scripts to its user (NOPERM); resolves otherwise, an outage too. */
  scriptsPermitted(): Promise<void>;
  /** The data nodes that evict keys at their maxmemory (warned about at start-up); none on the memory store. */
  evictingNodes(): Promise<EvictingNode[]>;
  /**
   * The JWT secret every instance on this store signs with when JWT_SECRET is unset (outside
   * production): `candidate` if none was kept yet, else the one kept first (set if absent, atomically).
   * The memory store is one process: `candidate` itself.
   */
  sharedJwtSecret(candidate: string): Promise<string>;
  close(): Promise<void>;
};

/**
 * A session store whose `create` gives up after `timeoutMs`, and then revokes the session should its
 * commands still run (a stalled Redis executes them once it resumes): a login that answered 503 must
 * leave no session behind, as no token for it was ever issued. The id is chosen here, so that a
 * creation that failed without an answer (the client's own command timer, a lost connection) is
 * revoked too: Redis may have run it, or may run it yet, ahead of the revocation on the same
 * connection.
 */
function revokingLateSessions(sessions: SessionStore, timeoutMs: number): SessionStore {
  return {
    ...sessions,
    create(input, lifetimes) {
      let gaveUp = false;
      const sessionId = input.sessionId ?? newSessionId();
      const revoke = () => {
        sessions.revoke(input.userId, sessionId).catch(() => undefined);
      };
      const created = sessions.create({ ...input, sessionId }, lifetimes);
      created.then((result) => {
        if (gaveUp && result !== "refused") revoke();
      }, revoke);
      return withDeadline(created, timeoutMs).catch((error: unknown) => {
        gaveUp = true;
        throw error;
      });
    },
  };
}

/**
 * The APIs' limiter: a call that misses `timeoutMs` is answered 503, so it is withdrawn (see
 * Withdrawal) should Redis run it late: a login refused 503 leaves no failed attempt against the
 * username, as revokingLateSessions leaves no session.
 */
function withdrawingLate(limiter: LimiterPort, timeoutMs: number): LimiterPort {
  return {
    ...limiter,
    limit(request) {
      const withdrawal = new Withdrawal();
      return withDeadline(limiter.limit({ ...request, withdrawal }), timeoutMs).catch((error: unknown) => {
        withdrawal.refuse();
        throw error;
      });
    },
  };
}

export function createRedisStore(options: {
  redis: RedisClient;
  prefix: string;
  timeoutMs?: number;
  watchdog?: WatchdogTimings;
}): Store {
  const { redis } = options;
  const timeouts = storeTimeouts(options.timeoutMs ?? 100);
  const timeoutMs = timeouts.apiMs;
  const heartbeat = options.watchdog ?? timeouts.watchdog;
  const watchdog = watchConnections(redis, heartbeat);
  const keys = createKeys(options.prefix);
  const limiter = createLimiter(withBacklogBound(redis, createRedisLimiter({ redis, keys })));
  const invalidations = createRedisInvalidations({
    redis,
    channel: `${options.prefix}invalidations`,
    peersKey: keys.invalidationPeers,
    countKey: keys.invalidationCount,
    heartbeat,
  });
  const sessions = revokingLateSessions(createRedisSessionStore({ redis, keys }), timeoutMs);
  const users = createRedisUserStore({ redis, keys });
  return {
    kind: "redis",
    // Announced outside the APIs' deadline: the wait for every instance's acknowledgement has a
    // bound of its own (see createRedisInvalidations), and a change made must not answer 503 for the wait.
    users: announcingUsers(guarded(users, timeoutMs), invalidations),
    sessions: announcingSessions(guarded(sessions, timeoutMs), invalidations),
    apiKeys: announcingApiKeys(guarded(createRedisApiKeyStore({ redis, keys }), timeoutMs), invalidations),
    subjects: announcingSubjects(guarded(createRedisSubjectStore({ redis, keys }), timeoutMs), invalidations),
    limiter: createLimiter(
      announcingLimiter(guarded(withdrawingLate(limiter, timeoutMs), timeoutMs), invalidations),
    ),
    unguarded: { limiter },
    invalidations,
    adoptCanonicalNames: () => adoptCanonicalNames({ redis, keys, users }),
    connected: (timeoutMs) =>
      redis.status === "ready"
        ? Promise.resolve(true)
        : new Promise((resolve) => {
            const done = (up: boolean) => {
              clearTimeout(timer);
              redis.off("ready", onReady);
              resolve(up);
            };
            const onReady = () => done(true);
            const timer = setTimeout(() => done(false), timeoutMs);
            redis.once("ready", onReady);
          }),
    ping: (timeoutMs) =>
      withDeadline(redis.ping(), timeoutMs).then(
        (reply) => reply === "PONG",
        () => false,
      ),
    onConnectionError(listener) {
      redis.on("error", (error: Error) => listener(clearError(error)));
      // A Redis Cluster reports a lost node (a master failing over) as "node error", not "error".
      redis.on("node error", listener);
    },
    refusedSetting: () => refusedSetting(redis),
    scriptsPermitted: () => scriptsPermitted(redis, `${options.prefix}{start-up}:probe`),
    evictingNodes: () => evictingNodes(redis),
    async sharedJwtSecret(candidate) {
      const replies = await withDeadline(
        redis.multi().set(keys.jwtSecret, candidate, "NX").get(keys.jwtSecret).exec(),
        timeoutMs,
      );
      const kept = replies?.[1]?.[1];
      if (typeof kept !== "string") throw new Error("no JWT secret kept in the store");
      return kept;
    },
    async close() {
      watchdog.stop();
      await invalidations.close();
      await redis.quit().catch(() => redis.disconnect());
    },
  };
}

export function createMemoryStore(): Store {
  const identity = createMemoryIdentityStore();
  const profiles = createMemoryProfiles();
  const memory = createMemoryLimiter({ identity, profiles });
  const limiter = createLimiter(memory);
  const invalidations = createLocalInvalidations();
  return {
    kind: "memory",
    users: announcingUsers(identity.users, invalidations),
    sessions: announcingSessions(identity.sessions, invalidations),
    apiKeys: announcingApiKeys(profiles.apiKeys, invalidations),
    subjects: announcingSubjects(profiles.subjects, invalidations),
    limiter: createLimiter(announcingLimiter(limiter, invalidations)),
    unguarded: { limiter },
    invalidations,
    // Nothing outlives the process: every name in it was stored canonical.
    adoptCanonicalNames: async () => ({ ran: false, adopted: 0, collisions: [] }),
    ping: async () => true,
    connected: async () => true,
    onConnectionError: () => {},
    refusedSetting: () => undefined,
    scriptsPermitted: async () => {},
    evictingNodes: async () => [],
    sharedJwtSecret: async (candidate) => candidate,
    async close() {
      memory.close();
      identity.close();
    },
  };
}

export function createStore(options: {
  redis: RedisSettings | undefined;
  timeoutMs: number;
  prefix: string;
}): Store {
  if (options.redis === undefined) return createMemoryStore();
  const redis = createRedisClient({
    settings: options.redis,
    connectTimeoutMs: storeTimeouts(options.timeoutMs).connectMs,
  });
  return createRedisStore({ redis, prefix: options.prefix, timeoutMs: options.timeoutMs });
}
