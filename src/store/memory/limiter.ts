// The limiter in process memory: the embedded default for a single instance without Redis. The
// session read and the count are one synchronous step, as Redis makes them one script.
import type { Rule, Window } from "../../config/rules.js";
import { evaluateLayer } from "../../ratelimit/algorithms.js";
import type { LayerEvaluation, LayerState, LayerStates, WindowOutcome } from "../../ratelimit/layer-state.js";
import {
  countsAll,
  type IdentityResult,
  type LayerResult,
  type LimiterPort,
  type LimitLayer,
  type LimitResult,
} from "../../ratelimit/limiter.js";
import { countsByWindow } from "../../ratelimit/reference-window.js";
import { type Clock, type Subject, userSubject } from "../../ratelimit/types.js";
import type { MemoryIdentity } from "./identity-store.js";
import type { MemoryProfiles } from "./profile-store.js";

const NO_SESSION = { kind: "no_session" } as const;

/** What is kept of a subject's category (as Redis keeps it) and the time after which none of it matters. */
type Entry = { states: LayerStates; expiresAtMs: number };

export type MemoryLimiter = LimiterPort & {
  /** Drops every layer with nothing left in it; runs by itself every `sweepIntervalMs`. */
  sweep(): void;
  /** How many layers are held. */
  size(): number;
  close(): void;
};

export type MemoryLimiterOptions = {
  /** Sessions and users, for a request with an identity; without it, such a request finds no session. */
  identity?: MemoryIdentity;
  /** API keys and provider subjects, for a request with such an identity. */
  profiles?: MemoryProfiles;
  clock?: Clock;
  sweepIntervalMs?: number;
  /** The most layer states held at once; MAX_KEPT when omitted. */
  maxEntries?: number;
};

/**
 * Layer states held at once (about 600 bytes each for one request's sliding log, so some 120 MB):
 * every new address, username or key makes one, kept for its longest window (an hour for the
 * built-in policy), and a flood of them must not grow the process without bound. Past it the state
 * counted least recently is forgotten, as Redis's maxmemory would evict it: that subject starts
 * afresh. A client can thus reset a count of its own only by sending this many others first.
 */
export const MAX_KEPT = 200_000;

const keyOf = (subject: Subject, category: string): string => `${subject}\u0000${category}`;
/**
 * The reference's fixed window (mode each) is kept apart from the category's other state, as the
 * Redis store keeps it in keys of its own (counted there without a script).
 */
const windowKeyOf = (subject: Subject, category: string): string => `${keyOf(subject, category)}\u0000w`;

/** A layer's state matters until its longest window has passed since the last count (gcra: its debt drains). */
function expiryOf(state: LayerState, nowMs: number, rule: Rule): number {
  const longest = Math.max(...rule.windows.map((w) => w.windowMs));
  switch (state.algorithm) {
    case "sliding-log":
      return nowMs + longest;
    case "sliding-counter":
      return Math.max(nowMs + 2 * longest, ...state.entries.map((e) => (e.b + 2 * e.w) / 1000));
    case "gcra":
      return Math.max(nowMs + longest, ...state.entries.map((e) => (e.at + e.debt) / 1000));
  }
}

/** A window's outcome as the port answers it: with the request counted, or as it stands. */
function windowOf(o: WindowOutcome, counted: boolean, nowUs: number) {
  return {
    limit: o.limit,
    windowMs: o.windowUs / 1000,
    used: counted ? o.usedAfter : o.usedNow,
    remaining: counted ? o.remainingAfter : o.remainingNow,
    resetAtMs: (counted ? o.resetAfterUs : o.resetNowUs) / 1000,
    retryAfterMs: o.room ? 0 : Math.max(1, Math.ceil((o.retryAtUs - nowUs) / 1000)),
  };
}

export function createMemoryLimiter(options: MemoryLimiterOptions = {}): MemoryLimiter {
  const clock = options.clock ?? Date.now;
  const maxEntries = options.maxEntries ?? MAX_KEPT;
  // In the order the states were last counted: the first is the one to forget when full.
  const kept = new Map<string, Entry>();
  /** One Rule object per user's own windows, so that answers built from it are prepared once. */
  const ownRules = new WeakMap<readonly Window[], Rule>();
  const ownRule = (windows: readonly Window[], tierRule: Rule | undefined): Rule => {
    const algorithm = tierRule?.algorithm ?? "sliding-log";
    let rule = ownRules.get(windows);
    if (rule === undefined || rule.algorithm !== algorithm) {
      rule = { algorithm, windows };
      ownRules.set(windows, rule);
    }
    return rule;
  };

  const limitNow = (request: Parameters<LimiterPort["limit"]>[0]): LimitResult => {
    const nowMs = clock();
    const nowUs = nowMs * 1000;
    const k = request.addend ?? 1;
    const dry = request.dryRun === true;
    const each = request.mode === "each";
    const layers: LimitLayer[] = [...request.layers];
    // The request's own layers only: the user's layer (an identity's) keeps its record, as on Redis.
    const fixedLayers = request.layers.length;
    const stateKey = (l: LimitLayer, i: number) =>
      i < fixedLayers && countsByWindow(l.rule, request.mode)
        ? windowKeyOf(l.subject, l.category)
        : keyOf(l.subject, l.category);
    const evaluate = (l: LimitLayer, i: number) =>
      evaluateLayer(l.rule, kept.get(stateKey(l, i))?.states, nowUs, dry, k);
    const evaluations: LayerEvaluation[] = layers.map((l, i) => evaluate(l, i));
    const shadow = (i: number) => layers[i]?.shadow === true;
    /**
     * In mode each a fixed window counts a refused hit too, as envoyproxy/ratelimit's INCRBY does:
     * over the limit, the count goes on growing until the window ends.
     */
    const countsRefused = (i: number) => each && layers[i]?.rule.algorithm === "fixed-window";
    const results = (counting: boolean): LayerResult[] =>
      evaluations.map((e, i) => {
        const counted = counting && (e.room || countsRefused(i));
        return { room: e.room, counted, windows: e.outcomes.map((o) => windowOf(o, counted, nowUs)) };
      });

    let identity: IdentityResult | undefined;
    const asked = request.identity;
    if (asked !== undefined) {
      // An enforced fixed layer that is full refuses before the session is looked at.
      if (!each && !countsAll(evaluations, shadow)) {
        return { kind: "limited", allowed: false, layers: results(false), identity: undefined };
      }
      const touched =
        (asked.kind === "profile"
          ? options.profiles?.profileNow(asked.subject, asked.proof, dry)
          : options.identity?.touchNow(asked.userId, asked.sessionId, asked.idleMs, !dry)) ?? NO_SESSION;
      if (touched.kind !== "ok") return touched;
      const tierRule = asked.rules.get(touched.tier);
      const own = touched.limits[asked.category];
      const rule = own === undefined ? tierRule : ownRule(own, tierRule);
      if (rule === undefined) return { kind: "unknown_tier", tier: touched.tier };
      const subject = asked.kind === "profile" ? asked.subject : userSubject(asked.userId);
      const mine = { subject, category: asked.category, rule };
      layers.push(mine);
      evaluations.push(evaluate(mine, layers.length - 1));
      identity = {
        tier: touched.tier,
        rule,
        ownRule: own === undefined ? undefined : rule,
        sessionExpiresAtMs: "expiresAt" in touched ? touched.expiresAt : 0,
        userId: "userId" in touched ? touched.userId : undefined,
      };
    }
    const counting = k > 0 && (each || countsAll(evaluations, shadow));
    if (counting && !dry) {
      layers.forEach((l, i) => {
        const evaluation = evaluations[i] as LayerEvaluation;
        if (!evaluation.room && !countsRefused(i)) return;
        const states = evaluation.commit();
        const key = stateKey(l, i);
        const before = kept.get(key);
        const expires = [states.log, states.record].map((s) => (s ? expiryOf(s, nowMs, l.rule) : 0));
        kept.delete(key);
        kept.set(key, { states, expiresAtMs: Math.max(before?.expiresAtMs ?? 0, ...expires) });
        if (kept.size > maxEntries) kept.delete(kept.keys().next().value as string);
      });
    }
    return {
      kind: "limited",
      allowed: evaluations.every((e) => e.room),
      layers: results(counting),
      identity,
    };
  };

  const limiter: MemoryLimiter = {
    limit: (request) => Promise.resolve(limitNow(request)),

    reset(subject, categories) {
      // As on Redis, where the window's key is not known here: the reference's windows stay.
      for (const category of categories) kept.delete(keyOf(subject, category));
      return Promise.resolve();
    },

    sweep() {
      const now = clock();
      for (const [key, entry] of kept) if (entry.expiresAtMs <= now) kept.delete(key);
    },

    size: () => kept.size,

    close() {
      clearInterval(timer);
    },
  };

  const timer = setInterval(() => limiter.sweep(), options.sweepIntervalMs ?? 10_000);
  timer.unref();
  return limiter;
}
