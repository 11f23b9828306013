// The configuration of tollgate's Envoy rate limit service (RLS), as envoyproxy/ratelimit reads it,
// with tollgate's additions: the types that load.ts builds and match.ts reads. Pure: no store, no network.
//
// The module's API (src/rls/):
//   loadRlsConfig(path, { defaultAlgorithm })  → RlsConfig            (load.ts; throws RlsConfigError)
//   readRlsSource(path) · rlsConfigFrom(path, source, …) → the same in two steps: read, then parse (load.ts)
//   limitsFor(config, domain, descriptors)     → (RlsLimit | undefined)[] (match.ts)
//   subjectOf(domain, descriptor, limit)       → the store subject of a matched descriptor (match.ts)
//   describeRlsConfig(config)                  → a JSON-able view for GET /admin/rls (match.ts)
//
// Behaviour follows envoyproxy/ratelimit at commit f2fb15770f7fd1c88ca6c3a1b58ee513917ace96
// (v1.4.0-287, July 2026): src/config/config_impl.go (loading, GetLimit), src/service/ratelimit.go
// (constructLimitsToCheck: replaces, unlimited), src/limiter/cache_key.go (the counting key) and
// src/utils/utilities.go (UnitToDivider: the unit lengths). Where tollgate differs, docs/rls-config.md
// says so.
import { ProblemsError } from "../config/problems.js";

/** The units of the reference, in seconds as its UnitToDivider defines them: a month is 30 days, a year 365. */
export const RLS_UNIT_SECONDS = {
  second: 1,
  minute: 60,
  hour: 3600,
  day: 86_400,
  week: 604_800,
  month: 2_592_000,
  year: 31_536_000,
} as const;
export type RlsUnit = keyof typeof RLS_UNIT_SECONDS;
export const RLS_UNITS = Object.keys(RLS_UNIT_SECONDS) as readonly RlsUnit[];

import { RLS_ALGORITHMS } from "../config/env.js";

export { RLS_ALGORITHMS };
/**
 * `fixed-window`: the reference's counter per window, windows aligned to multiples of `windowMs`
 * since the Unix epoch (so a `day` turns at 00:00 UTC, a `week` on Thursdays, a `month` every 30 days).
 * The others are tollgate's (src/config/rules.ts), over a sliding `windowMs`.
 */
export type RlsAlgorithm = (typeof RLS_ALGORITHMS)[number];

/** requests_per_unit is a uint32 in the reference's protobuf. */
export const MAX_REQUESTS_PER_UNIT = 4_294_967_295;

export type RlsLimit = {
  name: string | undefined;
  unit: RlsUnit;
  /** tollgate's `unit_multiplier` (1 when absent): the window is this many units. */
  unitMultiplier: number;
  /** 0 refuses every request, as in the reference. Meaningless when `unlimited`. */
  requestsPerUnit: number;
  windowMs: number;
  algorithm: RlsAlgorithm;
  /**
   * Answer OK with LimitRemaining = 2^32-1 and no current_limit, without counting (the reference's
   * unlimited). Such a limit has no window: unit "second", windowMs 0 and requestsPerUnit 0 mean nothing.
   */
  unlimited: boolean;
  /** Counted and reported, but never refuses. */
  shadowMode: boolean;
  /** The reference's quota_mode: refuses only when every quota-mode descriptor of the request is over. */
  quotaMode: boolean;
  /** Names of rules this one drops from the same request (see limitsFor). */
  replaces: readonly string[];
  detailedMetric: boolean;
  /** The descriptor's `metadata` (the reference returns it in dynamic metadata when the descriptor passed). */
  metadata: Readonly<Record<string, unknown>> | undefined;
  /**
   * The stats key path as the reference forms it (`domain.key_value.key`…): the configured path, with
   * request values only under detailed_metric / value_to_metric. Per match (see limitsFor).
   */
  statsKey: string;
  /**
   * A stable identity of this rule for store keys and caches: a hash of the domain, the rule's place
   * in the tree (its keys and values), its window and its algorithm. It changes when the window or
   * the algorithm does, not when requests_per_unit, name or flags do (the reference keeps counting
   * across a change of the limit, too).
   */
  id: string;
  /**
   * Per request entry, the wildcard pattern that stands for its value in the counting key
   * (share_threshold), or undefined: the request's own value. Empty when no entry shares. Per match.
   */
  sharedPatterns: readonly (string | undefined)[];
  /** Where the rule is written: `file:line`, or `request` for a descriptor's own limit override. */
  source: string;
};

/** One `descriptors` item of the configuration. */
export type RlsNode = {
  key: string;
  /** undefined: the key's default (no `value`, or an empty one). */
  value: string | undefined;
  /** The value split on `*` when it holds one (a wildcard), else undefined. */
  wildcard: readonly string[] | undefined;
  /** The rule's template (statsKey: the configured path; sharedPatterns empty). */
  limit: RlsLimit | undefined;
  shareThreshold: boolean;
  valueToMetric: boolean;
  detailedMetric: boolean;
  children: RlsLevel;
  line: number;
};

/** One level of the tree: its descriptors in file order, and the indexes matching reads. */
export type RlsLevel = {
  nodes: readonly RlsNode[];
  /** key → value → node (wildcard values too, so a literal value equal to the pattern matches it first). */
  exact: ReadonlyMap<string, ReadonlyMap<string, RlsNode>>;
  /** key → wildcard nodes of that key, in file order (the first that matches wins). */
  wildcards: ReadonlyMap<string, readonly RlsNode[]>;
  /** key → the node without a value. */
  defaults: ReadonlyMap<string, RlsNode>;
};

export type RlsDomain = {
  domain: string;
  /** The file that defines it, relative to RLS_CONFIG (its base name when RLS_CONFIG is a file). */
  file: string;
  /** tollgate's `all_or_none`: the request's limited descriptors are counted together or not at all. */
  allOrNone: boolean;
  root: RlsLevel;
};

export type RlsConfig = {
  domains: ReadonlyMap<string, RlsDomain>;
  /** A hash of the meaning (domains, trees, limits, resolved algorithms): not of files, lines or comments. */
  version: string;
  /** The files read, relative to RLS_CONFIG, sorted. */
  files: readonly string[];
  /** The algorithm of rules without one, and of descriptors' own limit overrides. */
  defaultAlgorithm: RlsAlgorithm;
};

/** An invalid configuration: every problem, one line each, `file:line: field: what`. Nothing is applied. */
export class RlsConfigError extends ProblemsError {
  constructor(path: string, problems: string[]) {
    super(`the RLS configuration ${path} is invalid`, problems);
  }
}

/** A request's descriptor, as RateLimitRequest.descriptors gives it (hits_addend aside). */
export type RequestDescriptor = {
  entries: readonly { key: string; value: string }[];
  /** The descriptor's own limit (RateLimitDescriptor.limit): replaces whatever the configuration says. */
  limit?: { requestsPerUnit: number; unit: RlsUnit } | undefined;
};
