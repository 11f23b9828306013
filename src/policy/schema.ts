// The policy file's schema (zod): names, limits, tiers, routes; what each problem is called.
import { z } from "zod";
import {
  ALGORITHMS,
  durationText,
  IP_LAYER,
  LIMIT_FORM,
  MAX_WINDOWS,
  parseLimit,
  type Window,
} from "../config/rules.js";
import { canonicalTarget } from "./request-target.js";
import { RESERVED_KEYS } from "./reserved-keys.js";

const NAME = /^[a-z][a-z0-9_-]{0,31}$/;
/** HEAD is not among them: it is answered by GET handlers upstream and limited by the GET routes. */
const METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"];
/** Keys of a tier that are settings, not categories. */
export const TIER_SETTINGS = ["algorithm", "mode"];

const BAD_LIMIT = `expected ${LIMIT_FORM}`;

/** A bad limit as a message repeats it: at most 40 characters of it (an admin API body may hold 16 kB). */
function shownLimit(item: unknown): string {
  const text = JSON.stringify(item) ?? String(item);
  return text.length <= 40 ? text : `${text.slice(0, 40)}…`;
}

type Issues = { addIssue(issue: { code: "custom"; message: string; path?: PropertyKey[] }): void };

/** A limit or a list of them, as windows shortest first, one per length; undefined after an issue. */
function readWindows(value: unknown, ctx: Issues, path: PropertyKey[]): Window[] | undefined {
  const list = Array.isArray(value) ? value : [value];
  if (list.length === 0 || list.length > MAX_WINDOWS) {
    ctx.addIssue({ code: "custom", path, message: `give 1 to ${MAX_WINDOWS} limits` });
    return undefined;
  }
  const windows: Window[] = [];
  list.forEach((item, i) => {
    const where = Array.isArray(value) ? [...path, i] : path;
    const limit = typeof item === "string" ? parseLimit(item) : undefined;
    if (limit === undefined)
      ctx.addIssue({
        code: "custom",
        path: where,
        message: `bad limit ${shownLimit(item)}: ${BAD_LIMIT}`,
      });
    else windows.push(limit);
  });
  if (windows.length !== list.length) return undefined;
  windows.sort((a, b) => a.windowMs - b.windowMs);
  for (let i = 1; i < windows.length; i += 1) {
    if ((windows[i] as Window).windowMs === (windows[i - 1] as Window).windowMs) {
      const length = durationText((windows[i] as Window).windowMs);
      ctx.addIssue({ code: "custom", path, message: `two limits over the same ${length} window: keep one` });
      return undefined;
    }
  }
  return windows;
}

/** A limit or a list of them, or null (a user's own limits: null follows the tier again). */
export const windowsOrNullSchema = z
  .unknown()
  .transform((value, ctx): Window[] | null =>
    value === null ? null : (readWindows(value, ctx, []) ?? z.NEVER),
  );

const algorithmSchema = z.enum(ALGORITHMS, { message: `algorithm must be one of ${ALGORITHMS.join(", ")}` });
const modeSchema = z.enum(["enforce", "shadow"], { message: "mode must be enforce or shadow" });

export type ParsedRule = { windows: Window[]; algorithm: (typeof ALGORITHMS)[number] | undefined };

/** A category's rule: a limit, a list, or { limit, algorithm }. */
const ruleSchema = z.unknown().transform((value, ctx): ParsedRule => {
  if (value !== null && typeof value === "object" && !Array.isArray(value)) {
    const object = value as Record<string, unknown>;
    const unknown = Object.keys(object).filter((k) => k !== "limit" && k !== "algorithm");
    if (unknown.length > 0) {
      ctx.addIssue({
        code: "custom",
        message: `unknown key${unknown.length > 1 ? "s" : ""} ${unknown.map((k) => `"${k}"`).join(", ")} (a rule takes limit and algorithm)`,
      });
      return z.NEVER;
    }
    let algorithm: ParsedRule["algorithm"];
    if (object.algorithm !== undefined) {
      const parsed = algorithmSchema.safeParse(object.algorithm);
      if (!parsed.success) {
        ctx.addIssue({
          code: "custom",
          path: ["algorithm"],
          message: parsed.error.issues[0]?.message ?? "bad algorithm",
        });
        return z.NEVER;
      }
      algorithm = parsed.data;
    }
    if (object.limit === undefined) {
      ctx.addIssue({ code: "custom", path: ["limit"], message: "required" });
      return z.NEVER;
    }
    const windows = readWindows(object.limit, ctx, ["limit"]);
    return windows === undefined ? z.NEVER : { windows, algorithm };
  }
  const windows = readWindows(value, ctx, []);
  return windows === undefined ? z.NEVER : { windows, algorithm: undefined };
});

// Names key plain objects here and there (a tier's categories, a user's own limits): none may be
// one of Object.prototype's ("constructor", the only lower-case one), which every object has.
const nameSchema = z
  .string()
  .regex(NAME, "use a lower-case name of up to 32 characters: a-z 0-9 _ -")
  .refine((n) => !(n in Object.prototype) && !RESERVED_KEYS.has(n), "this name is reserved; choose another");
const categorySchema = nameSchema.refine(
  (c) => c !== IP_LAYER,
  `"${IP_LAYER}" is the per-address layer's name`,
);
const tokenSchema = z.enum(["required", "none"]);
/** An unlimited route is answered at once, its token unread: requiring one there would be a lie. */
const UNLIMITED_NEEDS_NO_TOKEN = {
  message: "limit: false lets every request through unread, token or not; write token: none with it",
  path: ["limit"],
};

const tierSchema = z
  .object({ algorithm: algorithmSchema.optional(), mode: modeSchema.optional() })
  .catchall(ruleSchema)
  .superRefine((tier, ctx) => {
    for (const key of Object.keys(tier)) {
      if (TIER_SETTINGS.includes(key)) continue;
      const named = categorySchema.safeParse(key);
      if (!named.success)
        ctx.addIssue({ code: "custom", path: [key], message: named.error.issues[0]?.message ?? "" });
    }
  });

const routeSchema = z
  .strictObject({
    method: z
      .string()
      .transform((m) => m.toUpperCase())
      .refine((m) => m !== "HEAD", "method HEAD: a HEAD request is limited by the GET routes; write GET")
      .refine((m) => m === "HEAD" || METHODS.includes(m), `method must be one of ${METHODS.join(", ")}`)
      .optional(),
    path: z
      .string()
      .regex(/^\/[^?#\s]*$/, 'path must start with "/" and hold no query, fragment or space')
      .refine((p) => !p.slice(0, -2).includes("*"), 'only a trailing "/*" may hold a wildcard')
      .refine(
        (p) => canonicalTarget(p.endsWith("/*") ? p.slice(0, -2) || "/" : p).ok,
        "path must be one that requests can reach (no dot segments, ';', backslash or escaped delimiters)",
      ),
    category: categorySchema.optional(),
    token: tokenSchema.default("required"),
    limit: z.boolean().default(true),
  })
  .refine((r) => r.limit || r.token === "none", UNLIMITED_NEEDS_NO_TOKEN);

export const policySchema = z.strictObject({
  mode: modeSchema.default("enforce"),
  ip: ruleSchema.optional(),
  tiers: z.record(nameSchema, tierSchema),
  routes: z.array(routeSchema).default([]),
  default: z
    .strictObject({
      category: categorySchema,
      token: tokenSchema.default("required"),
      limit: z.boolean().default(true),
    })
    .refine((r) => r.limit || r.token === "none", UNLIMITED_NEEDS_NO_TOKEN),
});

export type ParsedPolicy = z.output<typeof policySchema>;
