// Envoy's rate limit service (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit), as
// envoyproxy/ratelimit answers it: each request descriptor is matched to a limit of the domain's
// configuration (RLS_CONFIG, src/rls/), counted by the limiter port in one store call (one layer
// per descriptor, `mode: "each"` as the reference counts, or all-or-none per domain), and answered
// with a status per descriptor in request order.
import type { DenialCache } from "../../check/denial-cache.js";
import type { Limiter, LimitLayer, LimitResult, WindowResult } from "../../ratelimit/limiter.js";
import { heldBy, Withdrawal } from "../../ratelimit/limiter.js";
import type { Rule } from "../../ratelimit/types.js";
import { GrpcError, GrpcStatus } from "./grpc-protocol.js";
import { answerOf, duration, NEAR_LIMIT_RATIO, OK, OVER_LIMIT, untilReset } from "./rls-answer.js";
import type { DescriptorStatus, RlsAnswer } from "./rls-codec.js";
import { MAX_UINT32, type RequestDescriptor, type RlsInput, type RlsUnitName } from "./rls-input.js";

/** A matched limit as this front end needs it (src/rls/ builds it from the configuration). */
export type RlsLimitView = {
  /** Stable per rule and window: the store's category and the denial cache's key. */
  id: string;
  name: string | undefined;
  unit: RlsUnitName;
  requestsPerUnit: number;
  rule: Rule;
  unlimited: boolean;
  shadowMode: boolean;
  /** The reference's quota_mode: over the limit refuses only when every quota-mode descriptor is over. */
  quotaMode: boolean;
  /** The reference's stats key (domain and key path; values only with detailed_metric). */
  statsKey: string;
  /** The status's current_limit, the same object for every call. */
  currentLimit: NonNullable<DescriptorStatus["current_limit"]>;
  /**
   * What a refusal is remembered under: the rule and its limit (a request's own limit counts under
   * the rule's counter, and a refusal under 1 a minute says nothing of one that brings 1000).
   */
  refusalKey: string;
};

/** A descriptor's match: its limit, the subject it is counted under, and the layer that counts it. */
export type RlsMatch = { limit: RlsLimitView; subject: string; layer: LimitLayer };

/** What the configuration in force says of one request: a limit and a counter per descriptor. */
export type RlsResolution = {
  allOrNone: boolean;
  /** Per descriptor, in request order; undefined when no limit matches (OK without current_limit). */
  limits: readonly (RlsMatch | undefined)[];
};

export type RlsRules = {
  resolve(domain: string, descriptors: readonly RequestDescriptor[]): RlsResolution;
};

/** Per descriptor with a limit: what it did, for metrics (labels: the domain and the stats key). */
export type RlsOutcome = "within" | "near" | "over" | "shadow" | "cached";

export type RlsContext = {
  rules: () => RlsRules;
  limiter: Limiter;
  denials: DenialCache | undefined;
  /** ShouldRateLimit answers or fails with UNAVAILABLE within this. */
  deadline: <T>(promise: Promise<T>) => Promise<T>;
  responseHeaders: boolean;
  onDescriptor?(domain: string, statsKey: string, outcome: RlsOutcome, hits: number): void;
  onStoreError?(error: unknown, requestId: string | undefined): void;
  /** A store call answered (the store's up gauge: a failure alone would leave it down for good). */
  onStoreOk?(): void;
  /** Each call's time, in seconds, failed ones too. */
  durations?: { observe(seconds: number): void };
  now?: () => number;
};

/** A decision: synchronous when nothing is counted (no limit, a cached refusal), else a promise. */
export type RlsDecide = (input: RlsInput) => RlsAnswer | Promise<RlsAnswer>;

/** ShouldRateLimit's decision, apart from its protocol: the gRPC method and `POST /json` share it. */
export function createRlsCore(context: RlsContext): RlsDecide {
  const now = context.now ?? Date.now;
  const { denials, onDescriptor, responseHeaders, durations } = context;
  const unavailable = (error: unknown, requestId: string | undefined, withdrawal: Withdrawal): GrpcError => {
    withdrawal.refuse();
    context.onStoreError?.(error, requestId);
    return new GrpcError(GrpcStatus.UNAVAILABLE, "the rate-limit store is unavailable");
  };

  /** The store's answer for the descriptors at `indexes` (one addend), written into their statuses. */
  const apply = (
    call: { domain: string; limits: readonly (RlsMatch | undefined)[]; statuses: DescriptorStatus[] },
    indexes: readonly number[],
    addend: number,
    result: LimitResult,
    nowMs: number,
    generation: number,
  ): void => {
    if (result.kind !== "limited") throw new Error(`a limiter answer without layers: ${result.kind}`);
    context.onStoreOk?.();
    // The store states when a window resets on its own clock, as it counted: read ours after it
    // answered, not before the call, or the call's own time would be added to every reset.
    const answeredMs = now();
    for (let l = 0; l < indexes.length; l += 1) {
      const answer = result.layers[l];
      const window = answer?.windows[0];
      if (answer === undefined || window === undefined) continue;
      const index = indexes[l] as number;
      const status = call.statuses[index] as DescriptorStatus;
      const matched = call.limits[index] as RlsMatch;
      const shadow = matched.layer.shadow === true;
      const over = !answer.room;
      status.code = over && !shadow ? OVER_LIMIT : OK;
      status.limit_remaining = Math.max(0, window.remaining);
      status.duration_until_reset = duration(untilReset(window, matched.layer.rule, answer.room, answeredMs));
      const outcome: RlsOutcome = over
        ? shadow
          ? "shadow"
          : "over"
        : window.used > Math.floor(NEAR_LIMIT_RATIO * window.limit)
          ? "near"
          : "within";
      onDescriptor?.(call.domain, matched.limit.statsKey, outcome, addend);
      // Only a refusal of one hit is remembered: one of more hits than are left says nothing
      // of a smaller request (the store would count it), while one hit refused means every
      // larger request is refused too, until it would pass.
      if (over && !shadow && addend === 1) remember(matched, window, nowMs, generation);
    }
  };

  const remember = (matched: RlsMatch, window: WindowResult, nowMs: number, generation: number): void => {
    const retryAtMs = nowMs + Math.max(1, window.retryAfterMs);
    denials?.remember(
      matched.subject,
      matched.limit.refusalKey,
      window.windowMs,
      undefined,
      {
        hit: {
          allowed: false,
          layer: 0,
          window: 0,
          limit: window.limit,
          windowMs: window.windowMs,
          used: window.used,
          remaining: window.remaining,
          resetAtMs: window.resetAtMs,
          retryAfterMs: window.retryAfterMs,
        },
        user: undefined,
      },
      { retryAtMs, untilMs: retryAtMs },
      generation,
    );
  };

  /** The call's time in `durations`, failed ones too (a store timeout is what Envoy waits longest for). */
  const observe = (started: number): void => durations?.observe((performance.now() - started) / 1000);

  /** The decision; a promise settles after observe(started), a synchronous one is observed by the caller. */
  const decide = (
    { domain, descriptors, addends, requestId, caller }: RlsInput,
    started: number,
  ): RlsAnswer | Promise<RlsAnswer> => {
    const { allOrNone, limits } = context.rules().resolve(domain, descriptors);
    const nowMs = now();
    const statuses: DescriptorStatus[] = [];
    const generation = denials?.generation() ?? 0;

    // Descriptors to count, by addend (a store call counts one addend): the first addend's
    // indexes, then any other's. In mode each a descriptor repeated in one request (counted under
    // the same subject and limit) goes to a later call, which Redis runs after the first: a store
    // may read every layer of a call before it counts any (the memory store does), and the
    // reference counts a repeat after the one before it (INCRBY per descriptor).
    let addend0 = 0;
    let counted: number[] | undefined;
    let others: [number, number[]][] | undefined;
    const repeats = (group: number[], layer: RlsMatch["layer"]): boolean =>
      !allOrNone &&
      group.some((j) => {
        const other = (limits[j] as RlsMatch).layer;
        return other.subject === layer.subject && other.category === layer.category;
      });
    let refusedFromCache = false;
    for (let i = 0; i < limits.length; i += 1) {
      const status: DescriptorStatus = { code: OK, limit_remaining: 0 };
      statuses.push(status);
      const matched = limits[i];
      if (matched === undefined) continue;
      const { limit } = matched;
      if (limit.unlimited) {
        status.limit_remaining = MAX_UINT32;
        continue;
      }
      status.current_limit = limit.currentLimit;
      const addend = addends[i] as number;
      const windowMs = (limit.rule.windows[0] as { windowMs: number }).windowMs;
      if (limit.requestsPerUnit === 0) {
        // A limit of nothing: every hit is over, as the reference answers it, without the store;
        // its reset is the end of the window as the reference's always is.
        status.code = limit.shadowMode ? OK : OVER_LIMIT;
        status.duration_until_reset = duration(windowMs - (nowMs % windowMs));
        onDescriptor?.(domain, limit.statsKey, limit.shadowMode ? "shadow" : "over", addend);
        continue;
      }
      const cached =
        addend > 0 && !limit.shadowMode
          ? denials?.lookup(matched.subject, limit.refusalKey, undefined, nowMs, windowMs)
          : undefined;
      if (cached !== undefined) {
        status.code = OVER_LIMIT;
        status.duration_until_reset = duration(cached.hit.retryAfterMs);
        onDescriptor?.(domain, limit.statsKey, "cached", addend);
        refusedFromCache = true;
        continue;
      }
      if (counted === undefined) {
        addend0 = addend;
        counted = [i];
      } else if (addend === addend0 && !repeats(counted, matched.layer)) {
        counted.push(i);
      } else {
        others ??= [];
        const group = others.find(([a, g]) => a === addend && !repeats(g, matched.layer));
        if (group === undefined) others.push([addend, [i]]);
        else group[1].push(i);
      }
    }

    // Nothing to count, or all-or-none and a descriptor refused from the cache (nothing is counted,
    // the others only report their limit): answered now.
    if (counted === undefined || (allOrNone && refusedFromCache)) {
      return answerOf(statuses, limits, responseHeaders);
    }
    if (allOrNone && others !== undefined) {
      throw new GrpcError(
        GrpcStatus.INVALID_ARGUMENT,
        "all_or_none counts one addend per request: the descriptors' hits_addend differ",
      );
    }
    const call = { domain, limits, statuses };
    const mode = allOrNone ? "all-or-none" : "each";
    const withdrawal = heldBy(caller, new Withdrawal()); // refused if the call fails or its caller leaves
    /** The store call of the descriptors at `indexes`, within the deadline. */
    const send = (indexes: number[], addend: number): Promise<LimitResult> => {
      try {
        const layers = indexes.map((index) => (limits[index] as RlsMatch).layer);
        return context.deadline(context.limiter.limit({ layers, addend, mode, withdrawal }));
      } catch (error) {
        return Promise.reject(error);
      }
    };
    if (others === undefined) {
      // The usual request, one addend: one store call, answered (and timed) in its continuation.
      const indexes = counted;
      return send(indexes, addend0).then(
        (answered) => {
          try {
            apply(call, indexes, addend0, answered, nowMs, generation);
            return answerOf(statuses, limits, responseHeaders);
          } finally {
            observe(started);
          }
        },
        (error: unknown) => {
          observe(started);
          throw unavailable(error, requestId, withdrawal);
        },
      );
    }
    const count = (indexes: number[], addend: number): Promise<void> =>
      send(indexes, addend).then(
        (answered) => apply(call, indexes, addend, answered, nowMs, generation),
        (error: unknown) => {
          throw unavailable(error, requestId, withdrawal);
        },
      );
    const calls = [count(counted, addend0)];
    for (const [addend, indexes] of others) calls.push(count(indexes, addend));
    return Promise.all(calls).then(
      () => {
        observe(started);
        return answerOf(statuses, limits, responseHeaders);
      },
      (error: unknown) => {
        observe(started);
        throw error;
      },
    );
  };

  return (input) => {
    const started = performance.now();
    try {
      const answer = decide(input, started);
      if (!(answer instanceof Promise)) observe(started);
      return answer;
    } catch (error) {
      observe(started);
      throw error;
    }
  };
}
