// The policy: tiers with per-category limits, and routes that map a request to a category.
import { readFileSync } from "node:fs";
import { parse as parseYaml } from "yaml";
import { z } from "zod";
import { canonicalTarget } from "./request-target.js";
import { normalizePath } from "./routes.js";

export const ANONYMOUS_TIER = "anonymous";

export type Limit = { count: number; windowMs: number; text: string };
export type TokenRule = "required" | "none";

/** What a matched route asks of the check. `category` is undefined only when `limited` is false. */
export type RouteRule = {
  category: string;
  token: TokenRule;
  limited: boolean;
};

type Route = RouteRule & { method: string | undefined; path: string; prefix: boolean };

export type Policy = {
  tiers: ReadonlyMap<string, ReadonlyMap<string, Limit>>;
  routes: readonly Route[];
  defaultRule: RouteRule;
  /** Every category that some route can reach, in order of first appearance. */
  categories: readonly string[];
};

export class PolicyError extends Error {
  readonly problems: string[];
  constructor(source: string, problems: string[]) {
    super(`invalid policy in ${source}:\n${problems.map((p) => `  - ${p}`).join("\n")}`);
    this.name = "PolicyError";
    this.problems = problems.map((p) => `${source}: ${p}`);
  }
}

export const DEFAULT_POLICY_YAML = `
tiers:
  anonymous:  { general: 100/1h,   search: 20/1h,   orders: 10/1h,   login: 10/15m }
  free:       { general: 100/1h,   search: 20/1h,   orders: 10/1h }
  pro:        { general: 1000/1h,  search: 200/1h,  orders: 100/1h }
  enterprise: { general: 10000/1h, search: 2000/1h, orders: 1000/1h }
routes:
  - { method: GET,  path: /api/products, category: general }
  - { method: GET,  path: /api/search,   category: search }
  - { method: POST, path: /api/orders,   category: orders }
  - { method: POST, path: /auth/login,   category: login, token: none }
  - { path: /health, token: none, limit: false }
  - { path: /ready,  token: none, limit: false }
default: { category: general, token: required }
`;

const NAME = /^[a-z][a-z0-9_-]{0,31}$/;
const METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"];
const UNIT_MS = { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const;
const MAX_COUNT = 1_000_000;
const MAX_WINDOW_MS = 7 * UNIT_MS.d;

/** Parses "<count>/<duration>", for example "100/1h" or "10/15m". */
export function parseLimit(text: string): Limit | undefined {
  const match = /^(\d{1,7})\/(\d{1,6})([smhd])$/.exec(text.trim());
  if (match === null) return undefined;
  const count = Number(match[1]);
  const windowMs = Number(match[2]) * UNIT_MS[match[3] as keyof typeof UNIT_MS];
  if (count < 1 || count > MAX_COUNT || windowMs < 1000 || windowMs > MAX_WINDOW_MS) return undefined;
  return { count, windowMs, text: text.trim() };
}

const limitSchema = z.union([z.string(), z.number()]).transform((value, ctx) => {
  const limit = parseLimit(String(value));
  if (limit === undefined) {
    ctx.addIssue({
      code: "custom",
      message: `bad limit "${String(value)}": expected <count>/<duration> with a count from 1 to ${MAX_COUNT} and a duration from 1s to 7d in s, m, h or d, e.g. 100/1h`,
    });
    return z.NEVER;
  }
  return limit;
});

const nameSchema = z.string().regex(NAME, "use a lower-case name of up to 32 characters: a-z 0-9 _ -");
const tokenSchema = z.enum(["required", "none"]);

const routeSchema = z.strictObject({
  method: z
    .string()
    .transform((m) => m.toUpperCase())
    .refine((m) => METHODS.includes(m), `method must be one of ${METHODS.join(", ")}`)
    .optional(),
  path: z
    .string()
    .regex(/^\/[^?#\s]*$/, 'path must start with "/" and hold no query, fragment or space')
    .refine((p) => !p.slice(0, -2).includes("*"), 'only a trailing "/*" may hold a wildcard')
    .refine(
      (p) => canonicalTarget(p.endsWith("/*") ? p.slice(0, -2) || "/" : p).ok,
      "path must be one that requests can reach (no dot segments, ';', backslash or escaped delimiters)",
    ),
  category: nameSchema.optional(),
  token: tokenSchema.default("required"),
  limit: z.boolean().default(true),
});

const policySchema = z.strictObject({
  tiers: z.record(nameSchema, z.record(nameSchema, limitSchema)),
  routes: z.array(routeSchema).default([]),
  default: z.strictObject({
    category: nameSchema,
    token: tokenSchema.default("required"),
    limit: z.boolean().default(true),
  }),
});

function formatPath(path: readonly PropertyKey[]): string {
  if (path.length === 0) return "(top level)";
  return path
    .map((p, i) => (typeof p === "number" ? `[${p}]` : i === 0 ? String(p) : `.${String(p)}`))
    .join("");
}

function zodProblems(error: z.ZodError): string[] {
  return error.issues.map((issue) => {
    if (issue.code === "unrecognized_keys") {
      const where = issue.path.length > 0 ? `${formatPath(issue.path)}: ` : "";
      return `${where}unknown key${issue.keys.length > 1 ? "s" : ""} ${issue.keys.map((k) => `"${k}"`).join(", ")}`;
    }
    return `${formatPath(issue.path)}: ${issue.message}`;
  });
}

type ParsedPolicy = z.output<typeof policySchema>;

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
  const rules: { where: string; category?: string | undefined; token: TokenRule; limit: boolean }[] = [
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
      if (parsed.tiers[tier]?.[rule.category] === undefined) {
        problems.push(
          `tiers.${tier}.${rule.category}: missing, but ${rule.where} can send ${tier === ANONYMOUS_TIER ? "anonymous requests" : `${tier} users`} to category "${rule.category}"`,
        );
      }
    }
  }
  return problems;
}

function buildPolicy(parsed: ParsedPolicy): Policy {
  const tiers = new Map<string, Map<string, Limit>>();
  for (const [tier, limits] of Object.entries(parsed.tiers)) {
    tiers.set(tier, new Map(Object.entries(limits)));
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
  return { tiers, routes, defaultRule, categories };
}

/** Validates a policy document (already parsed from YAML or JSON). */
export function policyFromDocument(document: unknown, source: string): Policy {
  const result = policySchema.safeParse(document);
  if (!result.success) throw new PolicyError(source, zodProblems(result.error));
  const problems = reachabilityProblems(result.data);
  if (problems.length > 0) throw new PolicyError(source, problems);
  return buildPolicy(result.data);
}

/** Parses policy text; YAML is a superset of JSON, so one parser reads both. */
export function parsePolicy(text: string, source: string): Policy {
  let document: unknown;
  try {
    document = parseYaml(text, { uniqueKeys: true });
  } catch (error) {
    throw new PolicyError(source, [`not valid YAML or JSON: ${(error as Error).message.split("\n")[0]}`]);
  }
  return policyFromDocument(document, source);
}

/** The policy from POLICY_FILE, or the built-in default. */
export function loadPolicy(file: string | undefined): Policy {
  if (file === undefined) return parsePolicy(DEFAULT_POLICY_YAML, "built-in policy");
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (error) {
    throw new PolicyError(`POLICY_FILE ${file}`, [
      `cannot read the file (${(error as NodeJS.ErrnoException).code ?? "error"})`,
    ]);
  }
  return parsePolicy(text, `POLICY_FILE ${file}`);
}
