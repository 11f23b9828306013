// The policy's vocabulary of limits: algorithms, windows, rules, layers. The limiter counts by them.
export const ALGORITHMS = ["sliding-log", "sliding-counter", "gcra"] as const;
/**
 * `sliding-log`: an exact log of request times. `sliding-counter`: two fixed-window counters
 * weighted by their overlap with the sliding window (O(1) memory, approximate). `gcra`: the generic
 * cell rate algorithm, a token bucket held in one timestamp (O(1) memory, exact for its definition).
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
