// Refusals answered without the store: a subject whose window is full stays refused until it frees.
import type { HitResult, Rule } from "../ratelimit/types.js";

/**
 * A full window as the store described it, not a rendered answer: each request that finds it makes
 * its own decision from it (decide.ts, as for an answer of the store), so that a cached refusal
 * reads exactly as an uncached one would for that requester. An address's refusal (the IP layer,
 * or an anonymous category) holds nothing of whoever filled it.
 */
export type Refusal = {
  /** The refusing window's state; `layer` is the caller's to set (it depends on the request's layers). */
  hit: HitResult;
  /** For a user's own window: the tier and own rule the store counted it under. */
  user: { tier: string; ownRule: Rule | undefined; userId?: string | undefined } | undefined;
};

type Entry = {
  /** Local clock (ms) until which this entry answers (at most `retryAtMs`). */
  untilMs: number;
  /** Local clock (ms) at which the same request would be allowed: what Retry-After counts down to. */
  retryAtMs: number;
  refusal: Refusal;
  /** Sessions seen valid by the store answer that refused (users only): another must be checked. */
  sessionIds: string[] | undefined;
};

/** How many sessions of one user a cached refusal remembers as valid. */
const MAX_SESSIONS = 8;

/**
 * Keyed by layer and window: a subject's category (a layer) and the length of the window that
 * refused, so that a layer of several windows, or a rate limit service's descriptor, holds the
 * refusal of each window apart.
 */
export type DenialCache = {
  /**
   * The refusal of `subject`'s `category` with Retry-After counted down (a copy), or undefined: of
   * its window of `windowMs`, or, without it, of whichever window frees last.
   */
  lookup(
    subject: string,
    category: string,
    sessionId: string | undefined,
    nowMs: number,
    windowMs?: number,
  ): Refusal | undefined;
  /**
   * Remembers a refusal whose request would pass at `retryAtMs`, answering it until `untilMs` (no
   * later), unless an invalidation arrived since `generation` was read (the store may have
   * answered from before it) or the cache is off.
   */
  remember(
    subject: string,
    category: string,
    windowMs: number,
    sessionId: string | undefined,
    refusal: Refusal,
    times: { retryAtMs: number; untilMs: number },
    generation: number,
  ): void;
  /** Bumped by every invalidation: read it before asking the store. */
  generation(): number;
  /** Forgets a subject's refusals (`u:<id>`, `ip:<address>`), or every refusal for "*". */
  invalidate(subject: string): void;
  /** Off: nothing is remembered or answered (while invalidations cannot be received). */
  setEnabled(enabled: boolean): void;
  size(): number;
};

export function createDenialCache(options: { maxEntries?: number } = {}): DenialCache {
  const maxEntries = options.maxEntries ?? 100_000;
  /** Per subject, per "<category>\n<window ms>". */
  const bySubject = new Map<string, Map<string, Entry>>();
  let entries = 0;
  let generation = 0;
  let enabled = true;

  const drop = (subject: string): void => {
    const own = bySubject.get(subject);
    if (own === undefined) return;
    entries -= own.size;
    bySubject.delete(subject);
  };

  /** The entry of one window, dropped when it no longer answers. */
  const live = (own: Map<string, Entry>, key: string, nowMs: number): Entry | undefined => {
    const entry = own.get(key);
    if (entry === undefined || entry.untilMs > nowMs) return entry;
    own.delete(key);
    entries -= 1;
    return undefined;
  };

  /** The layer's entry that frees last, of any window. */
  const latest = (own: Map<string, Entry>, category: string, nowMs: number): Entry | undefined => {
    let best: Entry | undefined;
    const prefix = `${category}\n`;
    for (const key of own.keys()) {
      if (!key.startsWith(prefix)) continue;
      const entry = live(own, key, nowMs);
      if (entry !== undefined && (best === undefined || entry.retryAtMs > best.retryAtMs)) best = entry;
    }
    return best;
  };

  return {
    lookup(subject, category, sessionId, nowMs, windowMs) {
      if (!enabled) return undefined;
      const own = bySubject.get(subject);
      if (own === undefined) return undefined;
      const entry =
        windowMs === undefined ? latest(own, category, nowMs) : live(own, `${category}\n${windowMs}`, nowMs);
      if (own.size === 0) bySubject.delete(subject);
      if (entry === undefined) return undefined;
      if (
        entry.sessionIds !== undefined &&
        (sessionId === undefined || !entry.sessionIds.includes(sessionId))
      ) {
        return undefined;
      }
      const { hit, user } = entry.refusal;
      // One object shape for every hit (no spreads on the check path).
      const counted: HitResult = {
        allowed: false,
        layer: hit.layer,
        window: hit.window,
        limit: hit.limit,
        windowMs: hit.windowMs,
        used: hit.used,
        remaining: hit.remaining,
        resetAtMs: hit.resetAtMs,
        retryAfterMs: Math.max(1, entry.retryAtMs - nowMs),
      };
      return { hit: counted, user };
    },

    remember(subject, category, windowMs, sessionId, refusal, times, seen) {
      if (!enabled || seen !== generation) return;
      const { retryAtMs } = times;
      const untilMs = Math.min(times.untilMs, retryAtMs);
      let own = bySubject.get(subject);
      if (own === undefined) {
        // Bounded: the oldest subjects go first.
        while (entries >= maxEntries && bySubject.size > 0) drop(bySubject.keys().next().value as string);
        own = new Map();
        bySubject.set(subject, own);
      }
      const key = `${category}\n${windowMs}`;
      const previous = own.get(key);
      let sessionIds: string[] | undefined;
      if (sessionId !== undefined) {
        // Sessions seen valid earlier stay so: a revocation since would have dropped the subject.
        const known = previous?.sessionIds ?? [];
        sessionIds = known.includes(sessionId) ? known : [...known.slice(-(MAX_SESSIONS - 1)), sessionId];
      }
      if (previous === undefined) entries += 1;
      own.set(key, { untilMs, retryAtMs, refusal, sessionIds });
    },

    generation: () => generation,

    invalidate(subject) {
      generation += 1;
      if (subject === "*") {
        bySubject.clear();
        entries = 0;
      } else {
        drop(subject);
      }
    },

    setEnabled(on) {
      generation += 1;
      enabled = on;
      if (!on) {
        bySubject.clear();
        entries = 0;
      }
    },

    size: () => entries,
  };
}
