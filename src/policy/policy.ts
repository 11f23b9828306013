// The policy: tiers with per-category rules, an optional per-address layer, and routes to categories.
import { readFileSync } from "node:fs";
import { parse as parseYaml, YAMLParseError } from "yaml";
import { ProblemsError, problemsOf } from "../config/problems.js";
import type { Rule } from "../config/rules.js";
import { reservedKeyProblems } from "./reserved-keys.js";
import { normalizePath, type Route, type RouteRule } from "./routes.js";

export const ANONYMOUS_TIER = "anonymous";

/** `shadow`: over-limit requests pass, marked; `enforce`: they are refused. */
export type PolicyMode = "enforce" | "shadow";

export type Policy = {
  /** Per tier, per category: the rule. */
  tiers: ReadonlyMap<string, ReadonlyMap<string, Rule>>;
  /** Per tier: whether its limits are enforced or only watched. */
  modes: ReadonlyMap<string, PolicyMode>;
  /** The per-address layer, counted for every limited request before identity. */
  ip: Rule | undefined;
  ipMode: PolicyMode;
  routes: readonly Route[];
  defaultRule: RouteRule;
  /** Every category that some route can reach, in order of first appearance. */
  categories: readonly string[];
};

/** Each problem names the file (or "built-in policy") and the field. */
export class PolicyError extends ProblemsError {
  constructor(source: string, problems: string[]) {
    super(
      `invalid policy in ${source}`,
      problems.map((p) => `${source}: ${p}`),
    );
  }
}

export const DEFAULT_POLICY_YAML = `
tiers:
  anonymous:  { general: 100/1h,   search: 20/1h,   orders: 10/1h,   login: 10/15m, account: 300/1h }
  free:       { general: 100/1h,   search: 20/1h,   orders: 10/1h,   account: 300/1h }
  pro:        { general: 1000/1h,  search: 200/1h,  orders: 100/1h,  account: 300/1h }
  enterprise: { general: 10000/1h, search: 2000/1h, orders: 1000/1h, account: 300/1h }
routes:
  - { method: GET,  path: /api/products, category: general }
  - { method: GET,  path: /api/search,   category: search }
  - { method: POST, path: /api/orders,   category: orders }
  - { method: POST, path: /auth/login,   category: login, token: none }
  - { path: /auth/logout,     category: account }
  - { path: /auth/logout-all, category: account }
  - { path: /auth/sessions/*, category: account }
  - { path: /me,              category: account }
  - { path: /health, token: none, limit: false }
  - { path: /ready,  token: none, limit: false }
default: { category: general, token: required }
`;

import { type ParsedPolicy, type ParsedRule, policySchema, TIER_SETTINGS } from "./schema.js";

const isRule = (key: string, value: unknown): value is ParsedRule =>
  !TIER_SETTINGS.includes(key) && value !== undefined;

/** Every (tier, category) pair that a route can reach must be defined. */
function reachabilityProblems(parsed: ParsedPolicy): string[] {
  const problems: string[] = [];
  const tierNames = Object.keys(parsed.tiers);
  if (!tierNames.includes(ANONYMOUS_TIER)) {
    problems.push(
      `tiers.${ANONYMOUS_TIER}: required (requests without a valid token are counted against it)`,
    );
    return problems;
  }
  const rules: { where: string; category?: string | undefined; token: string; limit: boolean }[] = [
    ...parsed.routes.map((r, i) => ({ where: `routes[${i}]`, ...r })),
    { where: "default", ...parsed.default },
  ];
  for (const rule of rules) {
    if (!rule.limit) continue;
    if (rule.category === undefined) {
      problems.push(`${rule.where}.category: required unless limit is false`);
      continue;
    }
    // Requests without a valid token always count against the anonymous tier; with a token,
    // a route that requires one is reached by every named tier.
    const reachedBy = rule.token === "required" ? tierNames : [ANONYMOUS_TIER];
    for (const tier of reachedBy) {
      const table = parsed.tiers[tier] as Record<string, unknown> | undefined;
      const value =
        table !== undefined && Object.hasOwn(table, rule.category) ? table[rule.category] : undefined;
      if (!isRule(rule.category, value)) {
        problems.push(
          `tiers.${tier}.${rule.category}: missing, but ${rule.where} can send ${tier === ANONYMOUS_TIER ? "anonymous requests" : `${tier} users`} to category "${rule.category}"`,
        );
      }
    }
  }
  return problems;
}

function buildPolicy(parsed: ParsedPolicy): Policy {
  const tiers = new Map<string, Map<string, Rule>>();
  const modes = new Map<string, PolicyMode>();
  for (const [tier, entries] of Object.entries(parsed.tiers)) {
    const rules = new Map<string, Rule>();
    for (const [category, value] of Object.entries(entries)) {
      if (!isRule(category, value)) continue;
      rules.set(category, {
        algorithm: value.algorithm ?? entries.algorithm ?? "sliding-log",
        windows: value.windows,
      });
    }
    tiers.set(tier, rules);
    modes.set(tier, entries.mode ?? parsed.mode);
  }
  const routes: Route[] = parsed.routes.map((r) => {
    const prefix = r.path.endsWith("/*");
    const path = normalizePath(prefix ? r.path.slice(0, -2) || "/" : r.path);
    return {
      method: r.method,
      path: prefix && path === "/" ? "" : path,
      prefix,
      category: r.category ?? "",
      token: r.token,
      limited: r.limit,
    };
  });
  const defaultRule: RouteRule = {
    category: parsed.default.category,
    token: parsed.default.token,
    limited: parsed.default.limit,
  };
  const categories = [...new Set([...routes, defaultRule].filter((r) => r.limited).map((r) => r.category))];
  const ip =
    parsed.ip === undefined
      ? undefined
      : { algorithm: parsed.ip.algorithm ?? "sliding-log", windows: parsed.ip.windows };
  return { tiers, modes, ip, ipMode: parsed.mode, routes, defaultRule, categories };
}

/** Validates a policy document (already parsed from YAML or JSON). */
export function policyFromDocument(document: unknown, source: string): Policy {
  const reserved = reservedKeyProblems(document);
  if (reserved.length > 0) throw new PolicyError(source, reserved);
  const result = policySchema.safeParse(document);
  if (!result.success) throw new PolicyError(source, problemsOf(result.error));
  const problems = reachabilityProblems(result.data);
  if (problems.length > 0) throw new PolicyError(source, problems);
  return buildPolicy(result.data);
}

/**
 * The parser's complaint and where: its message ends in " at line 3, column 2:" and a code frame,
 * which a one-line problem would leave dangling.
 */
function yamlProblem(error: Error): string {
  const at = error instanceof YAMLParseError ? error.linePos?.[0] : undefined;
  const first = error.message.split("\n")[0] ?? "";
  if (at === undefined) return first;
  return `${first.replace(/ at line \d+, column \d+:?$/, "")} (line ${at.line}, column ${at.col})`;
}

/** Parses policy text; YAML is a superset of JSON, so one parser reads both. */
export function parsePolicy(text: string, source: string): Policy {
  let document: unknown;
  try {
    document = parseYaml(text, { uniqueKeys: true });
  } catch (error) {
    throw new PolicyError(source, [`not valid YAML or JSON: ${yamlProblem(error as Error)}`]);
  }
  return policyFromDocument(document, source);
}

/**
 * POLICY_FILE's text as read once, or why it could not be read: under WORKERS the supervisor reads it
 * and every worker parses the same text, so that a file changed between two reads never leaves the
 * workers on two policies.
 */
export type PolicySource = { text: string } | { unreadable: string };

export function readPolicySource(file: string | undefined): PolicySource {
  if (file === undefined) return { text: DEFAULT_POLICY_YAML };
  try {
    return { text: readFileSync(file, "utf8") };
  } catch (error) {
    return { unreadable: (error as NodeJS.ErrnoException).code ?? "error" };
  }
}

/** The policy that a source read from POLICY_FILE (or the built-in one when unset) holds. */
export function policyFromSource(file: string | undefined, source: PolicySource): Policy {
  const name = file === undefined ? "built-in policy" : `POLICY_FILE ${file}`;
  if ("unreadable" in source) throw new PolicyError(name, [`cannot read the file (${source.unreadable})`]);
  return parsePolicy(source.text, name);
}

/** The policy from POLICY_FILE, or the built-in default. */
export function loadPolicy(file: string | undefined): Policy {
  return policyFromSource(file, readPolicySource(file));
}
