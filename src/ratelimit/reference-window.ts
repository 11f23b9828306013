// envoyproxy/ratelimit's fixed window, as the rate limit service counts it (mode `each`): a counter
// per window aligned to the epoch that every hit is added to, refused or not. Kept apart from the
// other algorithms' states so that a store can count it with one INCRBY and no script; every store
// answers it from here, so that they agree to the millisecond.
import type { LayerResult } from "./limiter.js";
import type { Rule } from "./types.js";

/**
 * Whether a layer is counted as the reference counts: a fixed window of one window, in mode each.
 * All-or-none (a domain's `all_or_none`, tollgate's own checks) keeps the fixed window in the
 * layer's record, since only a script can count several layers in all or none.
 */
export const countsByWindow = (rule: Rule, mode: "all-or-none" | "each" | undefined): boolean =>
  mode === "each" && rule.algorithm === "fixed-window" && rule.windows.length === 1;

/** The start (ms since the epoch) of the window of `windowMs` that holds `nowMs`. */
export const windowStartOf = (nowMs: number, windowMs: number): number => nowMs - (nowMs % windowMs);

/**
 * The layer's answer when its window's counter read `before` ahead of this request's `k` hits (with
 * them, whether they were written or not, as the scripts answer): room while the count stays within
 * the limit; a refusal frees at the window's end, or at the next one's for more hits than the limit
 * at once (they never pass).
 */
export function windowAnswer(
  rule: Rule,
  before: number,
  k: number,
  nowMs: number,
  counted: boolean,
): LayerResult {
  const { limit, windowMs } = rule.windows[0] as { limit: number; windowMs: number };
  const end = windowStartOf(nowMs, windowMs) + windowMs;
  const total = before + k;
  const room = total <= limit;
  const used = Math.min(total, limit);
  return {
    room,
    counted,
    windows: [
      {
        limit,
        windowMs,
        used,
        remaining: limit - used,
        resetAtMs: total > 0 ? end : nowMs,
        retryAfterMs: room ? 0 : Math.max(1, Math.ceil((k > limit ? end + windowMs : end) - nowMs)),
      },
    ],
  };
}
