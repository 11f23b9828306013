// Matching a request's descriptors against the RLS configuration, the way envoyproxy/ratelimit's
// GetLimit (src/config/config_impl.go) and constructLimitsToCheck (src/service/ratelimit.go) do, and
// the subject a matched descriptor is counted under.

import { apiKeyIdOf, hashApiKey } from "../auth/api-keys.js";
import {
  type RequestDescriptor,
  RLS_UNIT_SECONDS,
  type RlsConfig,
  type RlsDomain,
  type RlsLevel,
  type RlsLimit,
  type RlsNode,
} from "./model.js";
import { overrideId } from "./rule-ids.js";

type Entry = { key: string; value: string };
type Step = { node: RlsNode; how: "exact" | "wildcard" | "default" };

/**
 * The limit for each request descriptor, in order; undefined where none applies (answer OK without
 * current_limit). Per descriptor, as the reference's GetLimit:
 * - an unknown domain: undefined, for every descriptor (even one with its own limit);
 * - a descriptor's own `limit` (RateLimitDescriptor.limit): that limit, whatever the tree says
 *   (even when nothing matches), with the configuration's default algorithm, no name, no replaces,
 *   no shadow mode;
 * - otherwise the tree is walked one entry per level: at each level the entry's exact key and value,
 *   else the first wildcard value of that key (file order) that matches, else the key's default
 *   (no value). The limit is that of the node the last entry reaches; none when an entry matches
 *   nothing, when a node without children is reached before the last entry (the request is deeper
 *   than the tree), or when the node reached has no rate_limit (a shorter request than the tree
 *   gets the limit of the node it ends on, if any).
 * Then across the request, as constructLimitsToCheck: every matched limit's `replaces` (an unlimited
 * one's too) drops each limited rule of that name; unlimited rules are kept (answer OK, remaining
 * 2^32-1, nothing counted) and never dropped.
 */
export function limitsFor(
  config: RlsConfig,
  domain: string,
  descriptors: readonly RequestDescriptor[],
): (RlsLimit | undefined)[] {
  const rls = config.domains.get(domain);
  if (rls === undefined) return descriptors.map(() => undefined);
  const limits = descriptors.map((descriptor) => limitOf(config, rls, descriptor));
  dropReplaced(limits, (limit) => limit);
  return limits;
}

/**
 * limitsFor's second step, in place: every item's limit's `replaces` drops each limited rule of
 * that name (its item becomes undefined). `limitOf` reads an item's limit.
 */
export function dropReplaced<T>(items: (T | undefined)[], limitOf: (item: T) => RlsLimit): void {
  let replaced: Set<string> | undefined;
  for (const item of items) {
    if (item === undefined) continue;
    for (const name of limitOf(item).replaces) {
      replaced ??= new Set();
      replaced.add(name);
    }
  }
  if (replaced === undefined) return;
  for (let i = 0; i < items.length; i += 1) {
    const item = items[i];
    if (item === undefined) continue;
    const limit = limitOf(item);
    if (!limit.unlimited && limit.name !== undefined && replaced.has(limit.name)) items[i] = undefined;
  }
}

/** One descriptor's limit, before `replaces` (see limitsFor). */
export function limitOf(
  config: RlsConfig,
  rls: RlsDomain,
  descriptor: RequestDescriptor,
): RlsLimit | undefined {
  const { entries, limit: own } = descriptor;
  if (own !== undefined) {
    const windowMs = RLS_UNIT_SECONDS[own.unit] * 1000;
    return {
      name: undefined,
      unit: own.unit,
      unitMultiplier: 1,
      requestsPerUnit: own.requestsPerUnit,
      windowMs,
      algorithm: config.defaultAlgorithm,
      unlimited: false,
      shadowMode: false,
      quotaMode: false,
      replaces: [],
      detailedMetric: false,
      metadata: undefined,
      // Key names only: an override's values are the request's (a user id, a client's key), and a
      // metric label must neither carry them nor grow with them.
      statsKey: [rls.domain, ...entries.map((e) => e.key)].join("."),
      id: overrideId(rls.domain, windowMs, config.defaultAlgorithm),
      sharedPatterns: [],
      source: "request",
    };
  }
  if (entries.length === 0) return undefined;
  const path: Step[] = [];
  let level: RlsLevel = rls.root;
  for (const [i, entry] of entries.entries()) {
    const step = matchEntry(level, entry);
    if (step === undefined) return undefined;
    path.push(step);
    if (i === entries.length - 1) break;
    if (step.node.children.nodes.length === 0) return undefined;
    level = step.node.children;
  }
  const limit = path[path.length - 1]?.node.limit;
  if (limit === undefined) return undefined;
  const sharedPatterns = path.map((s) =>
    s.how === "wildcard" && s.node.shareThreshold ? s.node.value : undefined,
  );
  const statsKey = statsKeyOf(rls.domain, entries, path, limit.detailedMetric, sharedPatterns);
  const shares = sharedPatterns.some((p) => p !== undefined);
  // The rule itself when the match adds nothing to it: one object per rule, which its front end's
  // per-rule views are kept by.
  if (!shares && statsKey === limit.statsKey) return limit;
  return { ...limit, statsKey, sharedPatterns: shares ? sharedPatterns : [] };
}

function matchEntry(level: RlsLevel, entry: Entry): Step | undefined {
  const exact = level.exact.get(entry.key)?.get(entry.value);
  // A value equal to a wildcard pattern is matched by it as a wildcard (the reference finds it
  // first by exact lookup; counting and stats come out the same).
  if (exact !== undefined) return { node: exact, how: exact.wildcard ? "wildcard" : "exact" };
  for (const node of level.wildcards.get(entry.key) ?? []) {
    if (node.wildcard !== undefined && wildcardMatches(node.wildcard, entry.value)) {
      return { node, how: "wildcard" };
    }
  }
  const fallback = level.defaults.get(entry.key);
  return fallback === undefined ? undefined : { node: fallback, how: "default" };
}

/** Whether `value` matches a pattern split on "*": each "*" stands for any run of characters, even none. */
export function wildcardMatches(parts: readonly string[], value: string): boolean {
  const first = parts[0] ?? "";
  const last = parts[parts.length - 1] ?? "";
  if (parts.length === 1) return first === value;
  const fixed = parts.reduce((n, p) => n + p.length, 0);
  if (value.length < fixed || !value.startsWith(first) || !value.endsWith(last)) return false;
  let from = first.length;
  const until = value.length - last.length;
  for (const part of parts.slice(1, -1)) {
    const at = value.indexOf(part, from);
    if (at < 0 || at + part.length > until) return false;
    from = at + part.length;
  }
  return true;
}

/**
 * The reference's stats key of a match. With detailed_metric (the matched rule's): the domain and
 * every entry's `key_value` (`key_` for an empty value), a shared wildcard's pattern standing for its
 * value (and then an empty value gives `key`). Without: per level, `key_<configured value>` for an
 * exact match, `key_<pattern>` for a wildcard, `key` for a default, except that value_to_metric on the
 * node puts the request's value in (a shared wildcard keeps its pattern).
 */
const LONE_SURROGATE = /\p{Cs}/gu; // a request's byte that is not UTF-8 (rls-codec.ts)

/** A request's value as a stats key shows it: an API key by its id alone (no hash computed), a
 * byte that is not UTF-8 as U+FFFD, as a label prints it (else two labels could print alike). */
function shownValue(value: string): string {
  const id = apiKeyIdOf(value);
  return id === undefined ? value.replace(LONE_SURROGATE, "\uFFFD") : `tg_${id}`;
}

function statsKeyOf(
  domain: string,
  entries: readonly Entry[],
  path: readonly Step[],
  detailed: boolean,
  shared: readonly (string | undefined)[],
): string {
  const anyShared = shared.some((p) => p !== undefined);
  const parts = path.map(({ node, how }, i) => {
    const entry = entries[i] as Entry;
    const pattern = shared[i];
    if (detailed) {
      if (pattern !== undefined) return `${entry.key}_${pattern}`;
      const value = shownValue(entry.value);
      return anyShared ? pathPart(entry.key, value) : `${entry.key}_${value}`;
    }
    if (how === "exact") return pathPart(entry.key, shownValue(entry.value));
    if (how === "wildcard")
      return pathPart(entry.key, pattern ?? (node.valueToMetric ? shownValue(entry.value) : node.value));
    return pathPart(entry.key, node.valueToMetric ? shownValue(entry.value) : undefined);
  });
  return [domain, ...parts].join(".");
}

function pathPart(key: string, value: string | undefined): string {
  return value === undefined || value === "" ? key : `${key}_${value}`;
}

const PLAIN = /^[A-Za-z0-9._-]*$/;
const LONE_RUNS = /(\p{Cs}+)/u; // encodeURIComponent refuses a lone surrogate
const KEPT_BY_URI = /[!'()*~]/g;
const percent = (c: string): string => `%${c.charCodeAt(0).toString(16).toUpperCase()}`;
const SURROGATES = Array.from({ length: 0x800 }, (_, i) => `%u${(0xd800 + i).toString(16)}`);

/** A part of a subject: kept when plain, else percent-encoded (a lone surrogate as %u<hex>), whole
 * runs at once: a value may be a 60 KiB header, and the call has milliseconds. */
function encodePart(text: string): string {
  if (PLAIN.test(text)) return text;
  // Odd parts are runs of lone surrogates (usually none); no %-escape holds a KEPT_BY_URI character.
  const parts = text.split(LONE_RUNS);
  if (parts.length === 1) return encodeURIComponent(text).replace(KEPT_BY_URI, percent);
  const out: string[] = [];
  for (const [i, part] of parts.entries()) {
    if (i % 2 === 0) out.push(encodeURIComponent(part));
    else for (let j = 0; j < part.length; j += 1) out.push(SURROGATES[part.charCodeAt(j) - 0xd800] as string);
  }
  return out.join("").replace(KEPT_BY_URI, percent);
}

/**
 * A request's value in a subject: an API key (tollgate's `tg_…`) as `!` and its hash, never itself,
 * since subjects name store keys (the reference keeps every value as it came, secrets included).
 * No encoded value holds a bare "!", so no other value can stand for a key.
 */
function valuePart(value: string): string {
  return apiKeyIdOf(value) === undefined ? encodePart(value) : `!${hashApiKey(value)}`;
}

/**
 * The subject a matched descriptor is counted under: `rls:<domain>|<key>=<value>|<key>=<value>…`,
 * or `<key>~<pattern>` for an entry whose value a share_threshold wildcard stands for (every value it
 * matches shares one count). Domain, keys, values and patterns are kept when made of letters,
 * digits, ".", "_" and "-", and percent-encoded otherwise, so the separators `|`, `=` and `~` (and
 * "{", "}", ":") never come from them: two different descriptors never share a subject. Count it
 * under `limit.id` and the window.
 *
 * The reference's counter key is `<prefix><domain>_<key>_<value>_…_<key>_<value>_<window start>`
 * (src/limiter/cache_key.go): the same parts in the same order, but joined by "_" unescaped, so
 * there ("a", "b_c") and ("a_b", "c") share a counter; here they do not. Like the reference, the
 * subject holds the request's values, not the rule: a key-only rule counts each value apart.
 */
export function subjectOf(domain: string, descriptor: RequestDescriptor, limit: RlsLimit): string {
  let subject = `rls:${encodePart(domain)}`;
  for (const [i, entry] of descriptor.entries.entries()) {
    const pattern = limit.sharedPatterns[i];
    subject +=
      pattern === undefined
        ? `|${encodePart(entry.key)}=${valuePart(entry.value)}`
        : `|${encodePart(entry.key)}~${encodePart(pattern)}`;
  }
  return subject;
}

/** A JSON-able view of the configuration in force (for GET /admin/rls): every domain's tree. */
export function describeRlsConfig(config: RlsConfig): unknown {
  const describeLimit = (l: RlsLimit) => ({
    name: l.name ?? null,
    unlimited: l.unlimited,
    ...(l.unlimited
      ? {}
      : {
          unit: l.unit,
          unitMultiplier: l.unitMultiplier,
          requestsPerUnit: l.requestsPerUnit,
          windowMs: l.windowMs,
          algorithm: l.algorithm,
        }),
    replaces: l.replaces,
    statsKey: l.statsKey,
    id: l.id,
  });
  const describeLevel = (level: RlsLevel): unknown[] =>
    level.nodes.map((n) => ({
      key: n.key,
      value: n.value ?? null,
      line: n.line,
      ...(n.limit ? { rateLimit: describeLimit(n.limit) } : {}),
      shadowMode: n.limit?.shadowMode ?? false,
      quotaMode: n.limit?.quotaMode ?? false,
      detailedMetric: n.detailedMetric,
      valueToMetric: n.valueToMetric,
      shareThreshold: n.shareThreshold,
      ...(n.limit?.metadata ? { metadata: n.limit.metadata } : {}),
      descriptors: describeLevel(n.children),
    }));
  return {
    version: config.version,
    files: config.files,
    defaultAlgorithm: config.defaultAlgorithm,
    domains: [...config.domains.values()]
      .sort((a, b) => (a.domain < b.domain ? -1 : 1))
      .map((d) => ({
        domain: d.domain,
        file: d.file,
        allOrNone: d.allOrNone,
        descriptors: describeLevel(d.root),
      })),
  };
}
