// The identity ports: users and revocable sessions, as every store (memory, Redis) offers them.
import type { HitResult } from "../ratelimit/types.js";

export type User = {
  id: string;
  username: string;
  tier: string;
  passwordHash: string;
  createdAt: number;
  disabled: boolean;
};

export type NewUser = { id?: string; username: string; tier: string; passwordHash: string };

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

export type SessionInput = { userId: string; deviceName: string; ip: string; userAgent: string };

export type SessionLifetimes = { idleMs: number; maxAgeMs: number; maxPerUser: number };

/** A session's validity: ok with the user's current tier, or why not. */
export type SessionCheck = { kind: "ok"; tier: string } | { kind: "no_session" } | { kind: "user_inactive" };

/** The category's limits per tier, as the check path hands them to the store. */
export type TierLimits = ReadonlyMap<string, { limit: number; windowMs: number }>;

export type AuthorizeResult =
  | { kind: "no_session" }
  | { kind: "user_inactive" }
  | { kind: "unknown_tier"; tier: string }
  | { kind: "ok"; tier: string; hit: HitResult };

export type UserStore = {
  /** Inserts a user; "exists" when the username is taken. */
  create(user: NewUser): Promise<User | "exists">;
  /** Inserts or updates by username (USERS_FILE, demo users); keeps an existing user's id. */
  upsert(user: NewUser): Promise<User>;
  get(userId: string): Promise<User | undefined>;
  findByUsername(username: string): Promise<User | undefined>;
  setTier(userId: string, tier: string): Promise<boolean>;
  setDisabled(userId: string, disabled: boolean): Promise<boolean>;
  /** Whether any user exists (production refuses to start without users). */
  any(): Promise<boolean>;
};

export type SessionStore = {
  /** Creates a session, evicting the oldest beyond the cap, atomically. */
  create(input: SessionInput, lifetimes: SessionLifetimes): Promise<{ session: Session; evicted: string[] }>;
  /** Validates a session and renews its idle lifetime. */
  touch(userId: string, sessionId: string, idleMs: number): Promise<SessionCheck>;
  list(userId: string): Promise<Session[]>;
  revoke(userId: string, sessionId: string): Promise<boolean>;
  revokeAll(userId: string): Promise<number>;
};

/** The check path's one store call: session, tier and sliding window together. */
export type AuthorizeStore = {
  authorize(options: {
    userId: string;
    sessionId: string;
    category: string;
    limits: TierLimits;
    idleMs: number;
  }): Promise<AuthorizeResult>;
};
