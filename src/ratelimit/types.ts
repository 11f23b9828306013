// The sliding-window limiter's port: what every store (memory, Redis) offers and answers.

/** A limit: at most `limit` requests in any `windowMs` milliseconds. */
export type Rule = { limit: number; windowMs: number };

/**
 * A subject's hash-tag content: `u:<user id>` for a user, `ip:<address>` for an anonymous client.
 * Every key of one subject carries it, so one script can touch them all on Redis Cluster.
 */
export type Subject = string;

export type HitResult = {
  allowed: boolean;
  limit: number;
  /** Requests counted in the window, this one included when it was allowed. */
  used: number;
  remaining: number;
  /** Unix ms when the oldest counted request leaves the window (Remaining next grows). */
  resetAtMs: number;
  /** 0 when allowed; otherwise ms until a request would be allowed again (≥ 1). */
  retryAfterMs: number;
};

export type WindowState = { limit: number; used: number; remaining: number; resetAtMs: number };

export type RateLimitStore = {
  /** Counts a request when the window has room; a denied request leaves no trace. */
  hit(subject: Subject, category: string, rule: Rule): Promise<HitResult>;
  /** The window as it stands, without counting anything. */
  peek(subject: Subject, category: string, rule: Rule): Promise<WindowState>;
  /** Forgets the subject's windows for these categories. */
  reset(subject: Subject, categories: readonly string[]): Promise<void>;
};

export type Clock = () => number;

export const userSubject = (userId: string): Subject => `u:${userId}`;
export const ipSubject = (address: string): Subject => `ip:${address}`;

/** Builds a result from a window's count and its relevant timestamps, all in ms. */
export function hitResult(options: {
  allowed: boolean;
  rule: Rule;
  used: number;
  oldestMs: number;
  freeAtMs: number;
  nowMs: number;
}): HitResult {
  const { allowed, rule, used, oldestMs, freeAtMs, nowMs } = options;
  return {
    allowed,
    limit: rule.limit,
    used,
    remaining: Math.max(0, rule.limit - used),
    resetAtMs: used === 0 ? nowMs : oldestMs + rule.windowMs,
    retryAfterMs: allowed ? 0 : Math.max(1, Math.ceil(freeAtMs + rule.windowMs - nowMs)),
  };
}
