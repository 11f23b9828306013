// The RateLimitResponse of a decided request (rls.ts): quota_mode applied across its statuses, the
// overall code, and the RateLimit-* headers of its tightest limit when they are asked for. Plain
// loops: it runs once per call. And how long a descriptor waits (duration_until_reset).
import type { WindowResult } from "../../ratelimit/limiter.js";
import type { Rule } from "../../ratelimit/types.js";
import type { DescriptorStatus, Duration, RlsAnswer } from "./rls-codec.js";

/** envoy.service.ratelimit.v3.RateLimitResponse.Code */
export const OK = 1;
export const OVER_LIMIT = 2;

/**
 * The reference's "near limit" share of a limit (NEAR_LIMIT_RATIO): a hit is near when the count
 * it makes is past the share, rounded down (base_limiter.go's nearLimitThreshold).
 */
export const NEAR_LIMIT_RATIO = 0.8;

/** protobuf's Duration holds at most 10,000 years. */
const MAX_DURATION_SECONDS = 315_576_000_000;

/**
 * A wait in whole seconds, rounded up, as the reference's CalculateReset gives it: Envoy reads
 * only `seconds` (its X-RateLimit-Reset), so a fraction rounded down would say 0 while a window
 * still refuses. Whole milliseconds first, so that a quotient's float noise adds no second.
 */
export function duration(ms: number): Duration {
  const seconds = Number.isFinite(ms)
    ? Math.min(MAX_DURATION_SECONDS, Math.max(0, Math.ceil(Math.round(ms) / 1000)))
    : MAX_DURATION_SECONDS;
  return { seconds, nanos: 0 };
}

/** Per descriptor, its matched limit (undefined: none). */
type Limits = readonly ({ limit: { quotaMode: boolean; unlimited: boolean } } | undefined)[];

/** The answer of `statuses` and the `limits` they were decided under, both in request order. */
export function answerOf(statuses: DescriptorStatus[], limits: Limits, responseHeaders: boolean): RlsAnswer {
  // As the reference's shouldRateLimitWorker: OVER_LIMIT when a descriptor not in quota_mode is
  // over, or when every quota-mode descriptor is (an unlimited one is none). Each status stays as
  // counted: a quota-mode descriptor over its limit is reported OVER_LIMIT even when the call passes.
  let over = false;
  let quota = 0;
  let quotaOver = 0;
  let tightest: DescriptorStatus | undefined;
  for (let i = 0; i < statuses.length; i += 1) {
    const status = statuses[i] as DescriptorStatus;
    const limit = limits[i]?.limit;
    if (limit !== undefined && !limit.unlimited && limit.quotaMode) {
      quota += 1;
      if (status.code === OVER_LIMIT) quotaOver += 1;
    } else if (status.code === OVER_LIMIT) {
      over = true;
      // The headers' descriptor: the last one over its limit (quota-mode ones aside), as the reference picks it…
      tightest = status;
      continue;
    }
    // …else the first of the least remaining, among the descriptors that report a limit.
    if (
      status.current_limit !== undefined &&
      (tightest === undefined || status.limit_remaining < tightest.limit_remaining)
    ) {
      tightest = status;
    }
  }
  const overall = over || (quota > 0 && quotaOver === quota) ? OVER_LIMIT : OK;
  const response: RlsAnswer = { overall_code: overall, statuses };
  if (responseHeaders && tightest !== undefined) {
    const reset = tightest.duration_until_reset?.seconds ?? 0;
    response.response_headers_to_add = [
      { key: "RateLimit-Limit", value: String(tightest.current_limit?.requests_per_unit ?? 0) },
      { key: "RateLimit-Remaining", value: String(tightest.limit_remaining) },
      { key: "RateLimit-Reset", value: String(reset) },
    ];
  }
  return response;
}

/**
 * Denied: until the request would pass (its Retry-After). Allowed: until Remaining next grows (the
 * window's reset: a fixed window's end, the log's oldest entry leaving, the counter's estimate
 * falling by one); gcra: until the bucket is full again, `used` requests at one interval each.
 */
export function untilReset(window: WindowResult, rule: Rule, room: boolean, nowMs: number): number {
  if (!room) return window.retryAfterMs;
  // A fixed window that nothing was counted in (a look, hits_addend 0) still ends where it ends,
  // as the reference's CalculateReset says of every answer.
  if (rule.algorithm === "fixed-window" && window.resetAtMs <= nowMs) {
    return window.windowMs - (nowMs % window.windowMs);
  }
  if (rule.algorithm === "gcra") return (window.used * window.windowMs) / Math.max(1, window.limit);
  const untilMs = Math.max(0, window.resetAtMs - nowMs);
  // A fixed window ends, and a log is whole again, within one window of a request it counted; the
  // store's clock (microseconds) against ours (whole milliseconds) could say a millisecond more.
  return rule.algorithm === "sliding-counter" ? untilMs : Math.min(window.windowMs, untilMs);
}
