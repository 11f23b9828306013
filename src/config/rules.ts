// The policy's vocabulary of limits: algorithms, windows, rules, layers. The limiter counts by them.
import { parseWholeNumber } from "./numbers.js";

export const ALGORITHMS = ["sliding-log", "sliding-counter", "gcra", "fixed-window"] as const;
/**
 * `sliding-log`: an exact log of request times. `sliding-counter`: two fixed-window counters
 * weighted by their overlap with the sliding window (O(1) memory, approximate). `gcra`: the generic
 * cell rate algorithm, a token bucket held in one timestamp (O(1) memory, exact for its definition).
 * `fixed-window`: one counter per window, windows aligned to multiples of their length since the
 * Unix epoch, as envoyproxy/ratelimit counts (O(1) memory; up to twice the limit across a boundary).
 * It keeps the sliding counter's state, so a category can move between the two without losing count.
 */
export type Algorithm = (typeof ALGORITHMS)[number];

/** At most `limit` requests in any `windowMs` milliseconds (gcra: a burst of `limit`, refilled over the window). */
export type Window = { limit: number; windowMs: number };

/** One algorithm over one or more windows, shortest first: a request needs room in all of them. */
export type Rule = { algorithm: Algorithm; windows: readonly Window[] };

/** The most windows one rule may have (each sliding-log window costs a search of its layer's list). */
export const MAX_WINDOWS = 4;

/**
 * A rule counted under a name: the route's category, or `ip` for the per-address layer. A `shadow`
 * layer (policy mode shadow) refuses nothing: when it is full the request is only marked, and the
 * other layers decide and count it as if it were not there.
 */
export type Layer = { category: string; rule: Rule; shadow?: boolean };

/** The category name of the per-address layer; no route may use it. */
export const IP_LAYER = "ip";

/** A category's rule for every named tier, as the check hands it to the store. */
export type TierRules = ReadonlyMap<string, Rule>;

const UNIT_MS = { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const;
/** The largest count a window may have. */
export const MAX_COUNT = 1_000_000;
const MAX_WINDOW_MS = 7 * UNIT_MS.d;
const LIMIT = /^([0-9]+)\/([0-9]+)?([smhd])$/;
/** What parseLimit takes, as a message says it. */
export const LIMIT_FORM = `<count>/<duration> with a count from 1 to ${MAX_COUNT} and a duration from 1s to 7d in s, m, h or d, in decimal digits without sign, space or leading zero, e.g. 100/1h`;

/**
 * Parses "<count>/<duration>", for example "100/1h" or "10/15m"; "100/h" is "100/1h" (docs/policy.md).
 * One grammar for the policy file, LOGIN_LOCKOUT, the admin API's own limits and the CLI: the numbers
 * in plain decimal digits (no sign, no leading zero) and nothing around them, not even a space.
 */
export function parseLimit(text: string): Window | undefined {
  const match = LIMIT.exec(text);
  if (match === null) return undefined;
  const limit = parseWholeNumber(match[1] as string, 1, MAX_COUNT);
  const units = match[2] === undefined ? 1 : parseWholeNumber(match[2], 1, MAX_WINDOW_MS / 1000);
  if (limit === undefined || units === undefined) return undefined;
  const windowMs = units * UNIT_MS[match[3] as keyof typeof UNIT_MS];
  if (windowMs < 1000 || windowMs > MAX_WINDOW_MS) return undefined;
  return { limit, windowMs };
}

/** A window length as a policy writes it: the largest unit that divides it, e.g. 3600000 → "1h". */
export function durationText(ms: number): string {
  for (const unit of ["d", "h", "m"] as const)
    if (ms % UNIT_MS[unit] === 0) return `${ms / UNIT_MS[unit]}${unit}`;
  return `${Math.round(ms / 1000)}s`;
}

export const limitText = (w: Window): string => `${w.limit}/${durationText(w.windowMs)}`;
