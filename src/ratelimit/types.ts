// The limiter's port: rules, layers, what every store (memory, Redis) answers.

export const ALGORITHMS = ["sliding-log", "sliding-counter", "gcra"] as const;
/**
 * `sliding-log`: an exact log of request times. `sliding-counter`: two fixed-window counters
 * weighted by their overlap with the sliding window (O(1) memory, approximate). `gcra`: the generic
 * cell rate algorithm, a token bucket held in one timestamp (O(1) memory, exact for its definition).
 */
export type Algorithm = (typeof ALGORITHMS)[number];

/** At most `limit` requests in any `windowMs` milliseconds (gcra: a burst of `limit`, refilled over the window). */
export type Window = { limit: number; windowMs: number };

/** One algorithm over one or more windows, shortest first: a request needs room in all of them. */
export type Rule = { algorithm: Algorithm; windows: readonly Window[] };

/** The most windows one rule may have (each sliding-log window is one Redis key per subject). */
export const MAX_WINDOWS = 4;

/** A rule counted under a name: the route's category, or `ip` for the per-address layer. */
export type Layer = { category: string; rule: Rule };

/** The category name of the per-address layer; no route may use it. */
export const IP_LAYER = "ip";

/**
 * A subject's hash-tag content: `u:<user id>` for a user, `ip:<address>` for a client address,
 * `n:<hex>` for a username's failed logins. Every key of one subject carries it, so one script can
 * touch them all on Redis Cluster.
 */
export type Subject = string;

export const userSubject = (userId: string): Subject => `u:${userId}`;
export const ipSubject = (address: string): Subject => `ip:${address}`;
export const usernameSubject = (username: string): Subject =>
  `n:${Buffer.from(username, "utf8").toString("hex")}`;

/** One window's state, as an admin sees it. */
export type WindowState = {
  limit: number;
  windowMs: number;
  used: number;
  remaining: number;
  /** Unix ms when Remaining next grows (now, when nothing is counted). */
  resetAtMs: number;
};

export type HitResult = {
  allowed: boolean;
  /**
   * Which layer (index into the request's layers) and window (index into its rule) the numbers
   * describe: on a denial the refusing window that frees last, otherwise the one with least room.
   */
  layer: number;
  window: number;
  limit: number;
  windowMs: number;
  /** Requests counted in that window, this one included when it was allowed. */
  used: number;
  remaining: number;
  /** Unix ms when Remaining next grows. */
  resetAtMs: number;
  /** 0 when allowed; otherwise ms until this request would be allowed (≥ 1). */
  retryAfterMs: number;
};

export type HitOptions = {
  /** Decide without counting anything (a dry run, or an admin's look at a window). */
  dryRun?: boolean;
};

export type RateLimitStore = {
  /**
   * Counts a request in all of the subject's layers when every window of every layer has room, and
   * in none otherwise: a denied request leaves no trace.
   */
  hit(subject: Subject, layers: readonly Layer[], options?: HitOptions): Promise<HitResult>;
  /** Every window of one layer as it stands, without counting anything. */
  peek(subject: Subject, layer: Layer): Promise<WindowState[]>;
  /** Forgets the subject's windows for these categories. */
  reset(subject: Subject, categories: readonly string[]): Promise<void>;
};

export type Clock = () => number;

/** A rule of one sliding-log window: what the login lockout and simple callers use. */
export const logRule = (limit: number, windowMs: number): Rule => ({
  algorithm: "sliding-log",
  windows: [{ limit, windowMs }],
});
