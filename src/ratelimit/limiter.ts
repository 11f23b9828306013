// The limiter's one port: a request's layers (and, for a user, the session read in the same call)
// in, every window of every layer out. Every store (memory, Redis) implements `limit` and `reset`;
// `hit` and `peek` are built on `limit` here, once.
import type { Proof } from "../auth/subjects.js";
import type { Rule, TierRules } from "../config/rules.js";
import type { HitResult, Layer, Subject, WindowState } from "./types.js";

/** A subject's category under a rule: what one layer counts. */
export type LimitLayer = Layer & { subject: Subject };

/**
 * The user's layer, whose rule is read in the same store call as the session: the user's own
 * windows for the category, or the category's rule for the tier the user has now.
 */
export type IdentityLayer = SessionIdentity | ProfileIdentity;

export type SessionIdentity = {
  kind?: undefined;
  userId: string;
  sessionId: string;
  /** The session's idle lifetime, renewed by a counted check. */
  idleMs: number;
  category: string;
  rules: TierRules;
};

/**
 * A subject without a session (an API key, a provider token's subject): its profile (tier, block,
 * own limits; for a key, its hash) is read in the same call, under the subject's hash tag.
 */
export type ProfileIdentity = {
  kind: "profile";
  subject: Subject;
  proof: Proof;
  category: string;
  rules: TierRules;
};

export type LimitRequest = {
  /** Layers whose rule the caller knows (an IP layer, an anonymous category, a descriptor). */
  layers: readonly LimitLayer[];
  /** The user's layer, last, when the request carries a session. */
  identity?: IdentityLayer;
  /** How many requests this one counts as (default 1; 0 only looks). */
  addend?: number;
  /**
   * `all-or-none` (the default, the HTTP check): counted in every layer or in none; a full shadow
   * layer refuses nothing. `each` (Envoy's rate limit service): counted in every layer with room.
   * In `all-or-none` a full enforced layer refuses before the session is looked at.
   */
  mode?: "all-or-none" | "each";
  /** Decide without counting or renewing anything. */
  dryRun?: boolean;
  /** Set by a caller that may stop waiting for the answer (see Withdrawal). */
  withdrawal?: Withdrawal;
};

/**
 * A caller's word on a call it may stop waiting for: `refuse()` once it answered the request refused
 * without the store's answer (a check's 503, a rate limit call's UNAVAILABLE), or once the request's
 * caller left without an answer (see Caller). A refused request is never recorded, so what the call
 * counted is taken back: a part of it that the store runs afterwards (a stalled Redis runs what it
 * was sent once it resumes) as it answers, a part that had answered before (a Cluster's other slots,
 * the other store calls of one rate limit request) at the refusal. A request allowed without the
 * store (degraded) passed, and stays counted.
 */
export class Withdrawal {
  #refused = false;
  // A check's call is one part: its take-back is kept without an array; a second part's makes one.
  #first: (() => void) | undefined;
  #more: (() => void)[] | undefined;

  get refused(): boolean {
    return this.#refused;
  }

  /** The request was answered refused: what every part of the call counted is taken back. */
  refuse(): void {
    if (this.#refused) return;
    this.#refused = true;
    const [first, more] = [this.#first, this.#more];
    this.#first = undefined;
    this.#more = undefined;
    first?.();
    for (const takeBack of more ?? []) takeBack();
  }

  /** A store's: a part of the call counted, and `takeBack` undoes it, at once if the request was refused. */
  counted(takeBack: () => void): void {
    if (this.#refused) takeBack();
    else if (this.#first === undefined) this.#first = takeBack;
    else if (this.#more === undefined) this.#more = [takeBack];
    else this.#more.push(takeBack);
  }
}

/**
 * A caller that may leave before it reads its answer (a gRPC call past its grpc-timeout, or reset by
 * its client): the withdrawal of the store call made for its request is kept here (`heldBy`), and
 * refused when it leaves (`leave`). A request whose caller left counts nothing, as one answered
 * refused without the store: the caller applied its own failure mode, not tollgate's answer.
 */
export type Caller = { left?: boolean; withdrawal?: { refuse(): void } | undefined };

/** `withdrawal`, kept by `caller` (refused at once if the caller has left already); returned as given. */
export function heldBy<W extends Withdrawal | undefined>(caller: Caller | undefined, withdrawal: W): W {
  if (caller === undefined || withdrawal === undefined) return withdrawal;
  if (caller.left === true) withdrawal.refuse();
  else caller.withdrawal = withdrawal;
  return withdrawal;
}

/** The caller left without its answer: what its request counted is taken back. */
export function leave(caller: Caller): void {
  caller.left = true;
  caller.withdrawal?.refuse();
  caller.withdrawal = undefined;
}

/**
 * One window after the call: with the request counted when its layer counted it, otherwise as it
 * stands; `retryAfterMs` 0 when the window had room, otherwise ms until the request would (≥ 1).
 */
export type WindowResult = WindowState & { retryAfterMs: number };

export type LayerResult = {
  /** Every window had room. */
  room: boolean;
  counted: boolean;
  windows: WindowResult[];
};

export type IdentityResult = {
  tier: string;
  /** The rule the user's layer was counted under, and whether it is the user's own. */
  rule: Rule;
  ownRule: Rule | undefined;
  sessionExpiresAtMs: number;
  /** A profile's user (an API key's user_id), when it has one. */
  userId?: string | undefined;
};

export type LimitResult =
  | { kind: "no_session" }
  | { kind: "user_inactive" }
  | { kind: "unknown_tier"; tier: string }
  | {
      kind: "limited";
      /** Every window of every layer had room. */
      allowed: boolean;
      /** The request's layers in order, the user's last; only the fixed ones when refused before identity. */
      layers: LayerResult[];
      /** The user's tier and rule; undefined without an identity, or when a fixed layer refused before it. */
      identity: IdentityResult | undefined;
    };

/** What every store implements. */
export type LimiterPort = {
  limit(request: LimitRequest): Promise<LimitResult>;
  /** Forgets the subject's windows for these categories. */
  reset(subject: Subject, categories: readonly string[]): Promise<void>;
};

export type Limiter = LimiterPort & {
  /**
   * The layers of one subject, counted all-or-none, described as one window (see describe): a
   * denied request leaves no trace; a full shadow layer refuses nothing (the request counts in the
   * layers with room, and the answer is not allowed, describing the shadow layer's window).
   */
  hit(subject: Subject, layers: readonly Layer[], options?: { dryRun?: boolean }): Promise<HitResult>;
  /** Every window of one layer as it stands, without counting anything. */
  peek(subject: Subject, layer: Layer): Promise<WindowState[]>;
};

/** Whether every layer counts the request under all-or-none: each has room, or is in shadow mode. */
export function countsAll(layers: readonly { room: boolean }[], shadow: (layer: number) => boolean): boolean {
  return layers.every((layer, l) => layer.room || shadow(l));
}

/**
 * The window an answer describes: allowed, the one with least room left after this request;
 * denied, the refusing one that frees last, of an enforced layer when one refused (`shadow` tells
 * which layers are in shadow mode). Ties go to the last layer (the most specific, the route's
 * category after the IP layer) and, within it, to the first (shortest) window.
 */
export function describe(
  layers: readonly LayerResult[],
  allowed: boolean,
  shadow: (layer: number) => boolean = () => false,
): HitResult {
  const enforcedFull = !allowed && layers.some((l, i) => !l.room && !shadow(i));
  let best = Number.NEGATIVE_INFINITY;
  let at = layers.length - 1;
  let window = 0;
  for (let l = layers.length - 1; l >= 0; l -= 1) {
    if (enforcedFull && shadow(l)) continue;
    const windows = (layers[l] as LayerResult).windows;
    for (let i = 0; i < windows.length; i += 1) {
      const w = windows[i] as WindowResult;
      const value = allowed ? -w.remaining : w.retryAfterMs > 0 ? w.retryAfterMs : undefined;
      if (value !== undefined && value > best) {
        best = value;
        at = l;
        window = i;
      }
    }
  }
  const w = (layers[at] as LayerResult).windows[window];
  if (w === undefined) throw new Error("a layer without windows");
  return {
    allowed,
    layer: at,
    window,
    limit: w.limit,
    windowMs: w.windowMs,
    used: w.used,
    remaining: w.remaining,
    resetAtMs: w.resetAtMs,
    retryAfterMs: allowed ? 0 : Math.max(1, w.retryAfterMs),
  };
}

export function createLimiter(port: LimiterPort): Limiter {
  return {
    limit: (request) => port.limit(request),
    reset: (subject, categories) => port.reset(subject, categories),
    async hit(subject, layers, options) {
      const result = await port.limit({
        layers: layers.map((l) => ({ ...l, subject })),
        dryRun: options?.dryRun === true,
      });
      if (result.kind !== "limited") throw new Error(`no identity was asked for, yet: ${result.kind}`);
      return describe(result.layers, result.allowed, (l) => layers[l]?.shadow === true);
    },
    async peek(subject, layer) {
      const result = await port.limit({ layers: [{ ...layer, subject }], dryRun: true, addend: 0 });
      if (result.kind !== "limited") throw new Error(`no identity was asked for, yet: ${result.kind}`);
      return (result.layers[0] as LayerResult).windows.map((w) => ({
        limit: w.limit,
        windowMs: w.windowMs,
        used: w.used,
        remaining: w.remaining,
        resetAtMs: w.resetAtMs,
      }));
    },
  };
}
