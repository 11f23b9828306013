// The limiter in process memory: the embedded default for a single instance without Redis.
import { describedWindow, evaluateLayer, hitResultOf } from "../../ratelimit/algorithms.js";
import type { LayerEvaluation, LayerState, LayerStates } from "../../ratelimit/layer-state.js";
import type {
  Clock,
  HitResult,
  Layer,
  RateLimitStore,
  Rule,
  Subject,
  WindowState,
} from "../../ratelimit/types.js";

/** What is kept of a subject's category (as Redis keeps it) and the time after which none of it matters. */
type Entry = { states: LayerStates; expiresAtMs: number };

/** One layer of one subject, as the memory authorize store hands several subjects to `hitNow`. */
export type SubjectLayer = { subject: Subject; category: string; rule: Rule; shadow?: boolean };

export type MemoryRateLimitStore = RateLimitStore & {
  /** `hit` across subjects, synchronously: the memory check's session and windows are one step. */
  hitNow(layers: readonly SubjectLayer[], dryRun: boolean): HitResult;
  /** Drops every layer with nothing left in it; runs by itself every `sweepIntervalMs`. */
  sweep(): void;
  /** How many layers are held. */
  size(): number;
  close(): void;
};

export type MemoryRateLimitStoreOptions = { clock?: Clock; sweepIntervalMs?: number };

const keyOf = (subject: Subject, category: string): string => `${subject}\u0000${category}`;

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

export function createMemoryRateLimitStore(options: MemoryRateLimitStoreOptions = {}): MemoryRateLimitStore {
  const clock = options.clock ?? Date.now;
  const layers = new Map<string, Entry>();

  const hitNow = (request: readonly SubjectLayer[], dryRun: boolean): HitResult => {
    const nowMs = clock();
    const nowUs = nowMs * 1000;
    const evaluations: LayerEvaluation[] = request.map((l) =>
      evaluateLayer(l.rule, layers.get(keyOf(l.subject, l.category))?.states, nowUs, dryRun),
    );
    const allowed = evaluations.every((e) => e.room);
    const shadow = (i: number) => request[i]?.shadow === true;
    // A full shadow layer refuses nothing: the others count the request when they all have room.
    const counted = allowed || evaluations.every((e, i) => e.room || shadow(i));
    if (counted && !dryRun) {
      request.forEach((l, i) => {
        const evaluation = evaluations[i] as LayerEvaluation;
        if (!evaluation.room) return;
        const states = evaluation.commit();
        const key = keyOf(l.subject, l.category);
        const kept = layers.get(key);
        const expires = [states.log, states.record].map((s) => (s ? expiryOf(s, nowMs, l.rule) : 0));
        layers.set(key, { states, expiresAtMs: Math.max(kept?.expiresAtMs ?? 0, ...expires) });
      });
    }
    const at = describedWindow(evaluations, allowed, shadow);
    const outcome = (evaluations[at.layer] as LayerEvaluation).outcomes[at.window];
    if (outcome === undefined) throw new Error("a layer without windows");
    return hitResultOf(allowed, at, outcome, nowUs);
  };

  const store: MemoryRateLimitStore = {
    hit(subject, request, hitOptions) {
      const own = request.map((l) => ({ subject, category: l.category, rule: l.rule, shadow: l.shadow }));
      return Promise.resolve(hitNow(own, hitOptions?.dryRun === true));
    },

    peek(subject, layer: Layer): Promise<WindowState[]> {
      const nowUs = clock() * 1000;
      const evaluation = evaluateLayer(
        layer.rule,
        layers.get(keyOf(subject, layer.category))?.states,
        nowUs,
        true,
      );
      return Promise.resolve(
        evaluation.outcomes.map((o) => ({
          limit: o.limit,
          windowMs: o.windowUs / 1000,
          used: o.usedNow,
          remaining: o.remainingNow,
          resetAtMs: o.resetNowUs / 1000,
        })),
      );
    },

    reset(subject, categories) {
      for (const category of categories) layers.delete(keyOf(subject, category));
      return Promise.resolve();
    },

    hitNow,

    sweep() {
      const now = clock();
      for (const [key, entry] of layers) if (entry.expiresAtMs <= now) layers.delete(key);
    },

    size: () => layers.size,

    close() {
      clearInterval(timer);
    },
  };

  const timer = setInterval(() => store.sweep(), options.sweepIntervalMs ?? 10_000);
  timer.unref();
  return store;
}
