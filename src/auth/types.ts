// The identity ports: users and revocable sessions, as every store (memory, Redis) offers them.
import type { Window } from "../ratelimit/types.js";

/** Who a request is: the user, the session it came with, and the user's tier then. */
export type Identity = { userId: string; sessionId: string; tier: string };

/** Where a user came from: the admin API, USERS_FILE, or the built-in demo list. */
export type UserSource = "admin" | "file" | "demo";

/** What USERS_FILE said about a user at its last load: a restart applies only what the file changed. */
export type Seed = { tier: string; passwordHash: string };

export type User = {
  id: string;
  username: string;
  tier: string;
  passwordHash: string;
  createdAt: number;
  disabled: boolean;
  source: UserSource;
  seed: Seed | undefined;
  /** The user's own windows per category, set by an admin; the tier's apply to the others. */
  limits: Readonly<Record<string, readonly Window[]>>;
};

export type NewUser = {
  id?: string;
  username: string;
  tier: string;
  passwordHash: string;
  source?: UserSource;
  seed?: Seed;
};

export type UserPatch = {
  tier?: string;
  passwordHash?: string;
  disabled?: boolean;
  source?: UserSource;
  seed?: Seed;
  /** Per category: the user's own windows, or null to follow the tier again. */
  limits?: Readonly<Record<string, readonly Window[] | null>>;
};

/**
 * What giving stored users the canonical form of their names did (once per store, at start-up):
 * nothing when it was done before; else the names claimed, and each user whose canonical name
 * another user already holds (that user keeps it).
 */
export type NameAdoption = {
  ran: boolean;
  adopted: number;
  collisions: { userId: string; heldBy: string }[];
};

/** One page of the user listing, in user-id order; `nextCursor` is undefined on the last page. */
export type UserPage = { users: User[]; nextCursor: string | undefined };

export type Session = {
  sessionId: string;
  userId: string;
  deviceName: string;
  ip: string;
  userAgent: string;
  createdAt: number;
  lastAccessed: number;
  /** Absolute expiry (ms); the idle expiry is the store's own. */
  expiresAt: number;
};

export type SessionInput = {
  userId: string;
  deviceName: string;
  ip: string;
  userAgent: string;
  /** The password hash the login verified: creation is refused if the user changed since. */
  passwordHash: string;
  /** Chosen by the caller when it must be able to revoke the session without an answer; else new. */
  sessionId?: string;
};

export type SessionLifetimes = { idleMs: number; maxAgeMs: number; maxPerUser: number };

/** A session's validity: ok with the user's current tier, or why not. */
export type SessionCheck = { kind: "ok"; tier: string } | { kind: "no_session" } | { kind: "user_inactive" };

export type UserStore = {
  /** Inserts a user; "exists" when the username is taken. */
  create(user: NewUser): Promise<User | "exists">;
  get(userId: string): Promise<User | undefined>;
  findByUsername(username: string): Promise<User | undefined>;
  /**
   * Changes the given fields; false when there is no such user. A new password deletes every session
   * of the user in the same step: revoke them first to count them.
   */
  update(userId: string, patch: UserPatch): Promise<boolean>;
  /**
   * Deletes the user with every session it still has, and frees the username; false when there was
   * no such user. Revoke the sessions first to count them: this takes any a racing login added since.
   * `remember` (default true): wasRemoved answers true for the name from then on, so that USERS_FILE
   * does not bring back a user an admin deleted; false for a user USERS_FILE itself dropped.
   */
  remove(userId: string, options?: { remember?: boolean }): Promise<boolean>;
  /** Whether this username's user was deleted, remembered (and the name not taken again since). */
  wasRemoved(username: string): Promise<boolean>;
  /** Users after `cursor` (a user id) in id order, at most `limit` of them. */
  list(options: { cursor?: string; limit: number }): Promise<UserPage>;
  /** Whether any user exists (production refuses to start without users). */
  any(): Promise<boolean>;
};

export type SessionStore = {
  /**
   * Creates a session, evicting the oldest beyond the cap, atomically; "refused" when the user is
   * gone, disabled or has another password than the login verified (checked in the same step).
   */
  create(
    input: SessionInput,
    lifetimes: SessionLifetimes,
  ): Promise<{ session: Session; evicted: string[] } | "refused">;
  /** Validates a session and renews its idle lifetime. */
  touch(userId: string, sessionId: string, idleMs: number): Promise<SessionCheck>;
  list(userId: string): Promise<Session[]>;
  revoke(userId: string, sessionId: string): Promise<boolean>;
  revokeAll(userId: string): Promise<number>;
};
