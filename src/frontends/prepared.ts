// The text of a rule's answers that never changes, prepared once per rule instead of on every check.
//
// Why a WeakMap keyed by the rule and not a cache per listener: what is kept is a pure function of
// the (immutable) NamedRule, so every caller (each front end, the admin dry run) would prepare the
// same strings, and none can observe whether they were prepared before. Keyed weakly by the rule,
// the entries belong to it: a policy reload compiles new rules and the old entries go with the old
// rules, so nothing needs invalidating and nothing outlives the policy that made it.
import type { LimitState } from "../check/types.js";
import type { NamedRule } from "../policy/compile.js";
import { IP_LAYER } from "../ratelimit/types.js";

/**
 * What a window's answers share, prepared once per (rule, window, tier): the header values that do
 * not change and the constant parts of the 429 body, which then only needs its retry seconds
 * spliced in. A denial is the traffic a limiter must absorb cheaply (a client hammering after its
 * 429), so its answer costs no more to build than an allow's.
 */
export type PreparedWindow = {
  limitText: string;
  /** The window's quoted name in the RateLimit headers. */
  name: string;
  /** The 429 body is head + seconds + middle + seconds + tail. */
  head: string;
  middle: string;
  tail: string;
};

/** Bounded: rules come from the policy (and users' own rules), so this only matters if they churn. */
const MAX_PREPARED = 4096;
const windows = new WeakMap<NamedRule, Map<string, PreparedWindow>>();
const policies = new WeakMap<NamedRule, Map<NamedRule | undefined, string>>();

/** The map `rule` keeps in `memo`, made on first use. */
function entriesOf<K, V>(memo: WeakMap<NamedRule, Map<K, V>>, rule: NamedRule): Map<K, V> {
  let entries = memo.get(rule);
  if (entries === undefined) {
    entries = new Map();
    memo.set(rule, entries);
  }
  return entries;
}

function remember<K, V>(entries: Map<K, V>, key: K, value: V): V {
  if (entries.size >= MAX_PREPARED) entries.clear();
  entries.set(key, value);
  return value;
}

export function preparedWindow(limit: LimitState): PreparedWindow {
  const rule = limit.described;
  const entries = entriesOf(windows, rule);
  const key = `${limit.window}|${limit.tier}`;
  const known = entries.get(key);
  if (known !== undefined) return known;
  const windowSeconds = Math.ceil(limit.windowMs / 1000);
  const { tier, category } = limit;
  // Built as text: tier and category are policy names ([a-z0-9_-]) and the rest are numbers.
  const what =
    category === IP_LAYER
      ? `${limit.limit} requests per ${windowSeconds} seconds from this address`
      : `${limit.limit} ${category} requests per ${windowSeconds} seconds for tier ${tier}`;
  return remember(entries, key, {
    limitText: String(limit.limit),
    name: rule.windowNames[limit.window] ?? `"${rule.name}"`,
    head: `{"error":"rate_limit_exceeded","message":"Rate limit exceeded: ${what}. Retry in `,
    middle: ' seconds.","retry_after_seconds":',
    tail: `,"category":"${category}","tier":"${tier}","limit":${limit.limit},"window_seconds":${windowSeconds}}`,
  });
}

/** RateLimit-Policy: every window of every layer the request was counted against. */
export function policyHeader(layers: readonly NamedRule[]): string {
  const last = layers[layers.length - 1] as NamedRule;
  const first = layers.length > 1 ? layers[0] : undefined;
  const entries = entriesOf(policies, last);
  const known = entries.get(first);
  if (known !== undefined) return known;
  const header = layers
    .flatMap((layer) =>
      layer.rule.windows.map(
        (w, i) => `${layer.windowNames[i]};q=${w.limit};w=${Math.ceil(w.windowMs / 1000)}`,
      ),
    )
    .join(", ");
  return remember(entries, first, header);
}
