// The sliding window in process memory: the embedded default for a single instance without Redis.
import {
  type Clock,
  hitResult,
  type RateLimitStore,
  type Rule,
  type Subject,
  type WindowState,
} from "../../ratelimit/types.js";

/** A window's log of request times (ms, ascending); entries before `head` have left it. */
type Log = { times: number[]; head: number; windowMs: number };

export type MemoryRateLimitStore = RateLimitStore & {
  /** Drops every window with no request left in it; runs by itself every `sweepIntervalMs`. */
  sweep(): void;
  /** How many windows are held. */
  size(): number;
  close(): void;
};

export type MemoryRateLimitStoreOptions = { clock?: Clock; sweepIntervalMs?: number };

const keyOf = (subject: Subject, category: string): string => `${subject}\u0000${category}`;

function expire(log: Log, nowMs: number): void {
  const cutoff = nowMs - log.windowMs;
  const { times } = log;
  let head = log.head;
  while (head < times.length && (times[head] as number) <= cutoff) head += 1;
  if (head > 64 && head * 2 > times.length) {
    log.times = times.slice(head);
    log.head = 0;
  } else {
    log.head = head;
  }
}

export function createMemoryRateLimitStore(options: MemoryRateLimitStoreOptions = {}): MemoryRateLimitStore {
  const clock = options.clock ?? Date.now;
  const logs = new Map<string, Log>();

  const store: MemoryRateLimitStore = {
    hit(subject, category, rule: Rule) {
      const now = clock();
      const key = keyOf(subject, category);
      let log = logs.get(key);
      if (log === undefined) {
        log = { times: [], head: 0, windowMs: rule.windowMs };
        logs.set(key, log);
      }
      log.windowMs = rule.windowMs;
      expire(log, now);
      let used = log.times.length - log.head;
      const allowed = used < rule.limit;
      if (allowed) {
        // A clock that steps back must not unsort the log.
        const last = log.times[log.times.length - 1];
        log.times.push(last !== undefined && last > now ? last : now);
        used += 1;
      }
      const oldestMs = log.times[log.head] ?? now;
      const freeAtMs = allowed ? oldestMs : (log.times[log.head + used - rule.limit] ?? oldestMs);
      return Promise.resolve(hitResult({ allowed, rule, used, oldestMs, freeAtMs, nowMs: now }));
    },

    peek(subject, category, rule): Promise<WindowState> {
      const now = clock();
      const log = logs.get(keyOf(subject, category));
      let used = 0;
      let oldestMs = now;
      if (log !== undefined) {
        const cutoff = now - rule.windowMs;
        for (let i = log.head; i < log.times.length; i += 1) {
          const t = log.times[i] as number;
          if (t > cutoff) {
            if (used === 0) oldestMs = t;
            used += 1;
          }
        }
      }
      const { limit, remaining, resetAtMs } = hitResult({
        allowed: true,
        rule,
        used,
        oldestMs,
        freeAtMs: oldestMs,
        nowMs: now,
      });
      return Promise.resolve({ limit, used, remaining, resetAtMs });
    },

    reset(subject, categories) {
      for (const category of categories) logs.delete(keyOf(subject, category));
      return Promise.resolve();
    },

    sweep() {
      const now = clock();
      for (const [key, log] of logs) {
        const newest = log.times[log.times.length - 1];
        if (newest === undefined || newest <= now - log.windowMs) logs.delete(key);
      }
    },

    size: () => logs.size,

    close() {
      clearInterval(timer);
    },
  };

  const timer = setInterval(() => store.sweep(), options.sweepIntervalMs ?? 10_000);
  timer.unref();
  return store;
}
