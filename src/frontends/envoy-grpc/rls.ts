// Envoy's rate limit service (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit), as
// envoyproxy/ratelimit answers it: each request descriptor is matched to a limit of the domain's
// configuration (RLS_CONFIG, src/rls/), counted by the limiter port in one store call (one layer
// per descriptor, `mode: "each"` as the reference counts, or all-or-none per domain), and answered
// with a status per descriptor in request order.
import type { DenialCache } from "../../check/denial-cache.js";
import type { Limiter, LimitLayer, LimitResult, WindowResult } from "../../ratelimit/limiter.js";
import type { Rule } from "../../ratelimit/types.js";
import { GrpcError, GrpcStatus } from "./grpc-protocol.js";
import type { DescriptorStatus, Duration, RlsAnswer } from "./rls-codec.js";
import {
  MAX_UINT32,
  type RequestDescriptor,
  RLS_UNITS,
  type RlsInput,
  type RlsUnitName,
} from "./rls-input.js";

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
};

/** What the configuration in force says of one request: a limit and a counter per descriptor. */
export type RlsResolution = {
  allOrNone: boolean;
  /** Per descriptor, in request order; undefined when no limit matches (OK without current_limit). */
  limits: readonly ({ limit: RlsLimitView; subject: string } | undefined)[];
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
  now?: () => number;
};

/** envoy.service.ratelimit.v3.RateLimitResponse.Code */
const OK = 1;
const OVER_LIMIT = 2;
/** The reference's "near limit" share of a limit (NEAR_LIMIT_RATIO). */
const NEAR_LIMIT_RATIO = 0.8;

/** protobuf's Duration holds at most 10,000 years. */
const MAX_DURATION_MS = 315_576_000_000_000;

function duration(ms: number): Duration {
  const whole = Number.isFinite(ms) ? Math.min(MAX_DURATION_MS, Math.max(0, Math.ceil(ms))) : MAX_DURATION_MS;
  return { seconds: Math.floor(whole / 1000), nanos: (whole % 1000) * 1_000_000 };
}

/**
 * A refusal is remembered under the rule and its limit: a descriptor's own limit (a request's
 * override) counts under the rule's counter, and a refusal under 1 a minute says nothing of a
 * request that brings its own 1000 a minute.
 */
const refusalKey = (limit: RlsLimitView): string => `${limit.id}:${limit.requestsPerUnit}`;

/**
 * Denied: until the request would pass (its Retry-After). Allowed: until Remaining next grows (the
 * window's reset: a fixed window's end, the log's oldest entry leaving, the counter's estimate
 * falling by one); gcra: until the bucket is full again, `used` requests at one interval each.
 */
function untilReset(window: WindowResult, rule: Rule, room: boolean, nowMs: number): number {
  if (!room) return window.retryAfterMs;
  if (rule.algorithm === "gcra") return (window.used * window.windowMs) / Math.max(1, window.limit);
  const untilMs = Math.max(0, window.resetAtMs - nowMs);
  // A fixed window ends, and a log is whole again, within one window of a request it counted; the
  // store's clock (microseconds) against ours (whole milliseconds) could say a millisecond more.
  return rule.algorithm === "sliding-counter" ? untilMs : Math.min(window.windowMs, untilMs);
}

/** ShouldRateLimit's decision, apart from its protocol: the gRPC method and `POST /json` share it. */
export function createRlsCore(context: RlsContext): (input: RlsInput) => Promise<RlsAnswer> {
  const now = context.now ?? Date.now;
  return async ({ domain, descriptors, addends, requestId }) => {
    const { allOrNone, limits } = context.rules().resolve(domain, descriptors);
    const nowMs = now();
    const statuses: DescriptorStatus[] = descriptors.map(() => ({ code: OK, limit_remaining: 0 }));
    const generation = context.denials?.generation() ?? 0;

    // Descriptors to count, grouped by addend (a store call counts one addend).
    const groups = new Map<number, { index: number; layer: LimitLayer }[]>();
    let refusedFromCache = false;
    for (let i = 0; i < limits.length; i += 1) {
      const matched = limits[i];
      if (matched === undefined) continue;
      const { limit, subject } = matched;
      const status = statuses[i] as DescriptorStatus;
      if (limit.unlimited) {
        status.limit_remaining = MAX_UINT32;
        continue;
      }
      status.current_limit = {
        ...(limit.name === undefined ? {} : { name: limit.name }),
        requests_per_unit: limit.requestsPerUnit,
        unit: RLS_UNITS[limit.unit],
      };
      const addend = addends[i] as number;
      if (limit.requestsPerUnit === 0) {
        // A limit of nothing: every hit is over, as the reference answers it, without the store.
        status.code = limit.shadowMode ? OK : OVER_LIMIT;
        context.onDescriptor?.(domain, limit.statsKey, limit.shadowMode ? "shadow" : "over", addend);
        continue;
      }
      const windowMs = (limit.rule.windows[0] as { windowMs: number }).windowMs;
      const cached =
        addend > 0 && !limit.shadowMode
          ? context.denials?.lookup(subject, refusalKey(limit), undefined, nowMs, windowMs)
          : undefined;
      if (cached !== undefined) {
        status.code = OVER_LIMIT;
        status.duration_until_reset = duration(cached.hit.retryAfterMs);
        context.onDescriptor?.(domain, limit.statsKey, "cached", addend);
        refusedFromCache = true;
        continue;
      }
      let group = groups.get(addend);
      if (group === undefined) {
        group = [];
        groups.set(addend, group);
      }
      group.push({
        index: i,
        layer: { subject, category: limit.id, rule: limit.rule, shadow: limit.shadowMode },
      });
    }

    if (!(allOrNone && refusedFromCache)) {
      if (allOrNone && groups.size > 1) {
        throw new GrpcError(
          GrpcStatus.INVALID_ARGUMENT,
          "all_or_none counts one addend per request: the descriptors' hits_addend differ",
        );
      }
      const calls = [...groups].map(async ([addend, group]) => {
        let result: LimitResult;
        try {
          result = await context.deadline(
            context.limiter.limit({
              layers: group.map((g) => g.layer),
              addend,
              mode: allOrNone ? "all-or-none" : "each",
            }),
          );
        } catch (error) {
          context.onStoreError?.(error, requestId);
          throw new GrpcError(GrpcStatus.UNAVAILABLE, "the rate-limit store is unavailable");
        }
        if (result.kind !== "limited") throw new Error(`a limiter answer without layers: ${result.kind}`);
        // The store states when a window resets on its own clock, as it counted: read ours after it
        // answered, not before the call, or the call's own time would be added to every reset.
        const answeredMs = now();
        group.forEach(({ index, layer }, l) => {
          const answer = result.layers[l];
          const window = answer?.windows[0];
          if (answer === undefined || window === undefined) return;
          const status = statuses[index] as DescriptorStatus;
          const matched = limits[index] as { limit: RlsLimitView; subject: string };
          const over = !answer.room;
          status.code = over && !layer.shadow ? OVER_LIMIT : OK;
          status.limit_remaining = Math.max(0, window.remaining);
          status.duration_until_reset = duration(untilReset(window, layer.rule, answer.room, answeredMs));
          const outcome: RlsOutcome = over
            ? layer.shadow
              ? "shadow"
              : "over"
            : window.used >= NEAR_LIMIT_RATIO * window.limit
              ? "near"
              : "within";
          context.onDescriptor?.(domain, matched.limit.statsKey, outcome, addend);
          // Only a refusal of one hit is remembered: one of more hits than are left says nothing
          // of a smaller request (the store would count it), while one hit refused means every
          // larger request is refused too, until it would pass.
          if (over && !layer.shadow && addend === 1) {
            const retryAtMs = nowMs + Math.max(1, window.retryAfterMs);
            context.denials?.remember(
              matched.subject,
              refusalKey(matched.limit),
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
          }
        });
      });
      await Promise.all(calls);
    } else {
      // All-or-none and a descriptor refused from the cache: nothing is counted, the others only
      // report their limit.
      for (const group of groups.values()) {
        for (const { index } of group) (statuses[index] as DescriptorStatus).code = OK;
      }
    }

    // quota_mode, as the reference: its descriptors refuse only when every one of them is over.
    let quota = 0;
    let quotaOver = 0;
    limits.forEach((m, i) => {
      if (m?.limit.quotaMode !== true) return;
      quota += 1;
      if ((statuses[i] as DescriptorStatus).code === OVER_LIMIT) quotaOver += 1;
    });
    if (quota > 0 && quotaOver < quota) {
      limits.forEach((m, i) => {
        if (m?.limit.quotaMode === true) (statuses[i] as DescriptorStatus).code = OK;
      });
    }
    const overall = statuses.some((s) => s.code === OVER_LIMIT) ? OVER_LIMIT : OK;
    const response: RlsAnswer = { overall_code: overall, statuses };
    if (context.responseHeaders) {
      const counted = statuses.filter((s) => s.current_limit !== undefined);
      if (counted.length > 0) {
        const tightest = counted.reduce((a, b) => (b.limit_remaining < a.limit_remaining ? b : a));
        const reset = tightest.duration_until_reset?.seconds ?? 0;
        response.response_headers_to_add = [
          { key: "RateLimit-Limit", value: String(tightest.current_limit?.requests_per_unit ?? 0) },
          { key: "RateLimit-Remaining", value: String(tightest.limit_remaining) },
          { key: "RateLimit-Reset", value: String(reset) },
        ];
      }
    }
    return response;
  };
}
