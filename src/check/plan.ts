// Steps 1 and 2 of a check: the route of the request target, then the token; what the store must count.
import type { TierRules } from "../config/rules.js";
import { type CompiledPolicy, type NamedRule, routeFor } from "../policy/compile.js";
import type { RouteRule } from "../policy/routes.js";
import { ipSubject, userSubject } from "../ratelimit/types.js";
import type { Decision, Facts, Plan } from "./types.js";

const NO_RULES: TierRules = new Map();

/** Step 1: the request target's route, or the answer when the route alone gives it. */
export type RouteStep = { route: RouteRule } | { done: Decision };

/**
 * The route of a request, or the answer for an ambiguous target (400) or a route without limits: those
 * are answered at once, before any credential is read (a provider token may wait on its keys).
 */
export function routeStep(compiled: CompiledPolicy, method: string, path: string): RouteStep {
  const route = routeFor(compiled, method, path);
  if (typeof route === "string") {
    // Never counted as another route: an upstream could read this target as a different path.
    const description = `The request target is ambiguous: ${route}`;
    return { done: { kind: "deny", status: 400, description } };
  }
  if (!route.limited)
    return { done: { kind: "allow", identity: undefined, limit: undefined, degraded: false } };
  return { route };
}

/** Step 1 and 2 of the decision: the route (given when the caller took step 1 already), then the token. */
export function plan(
  compiled: CompiledPolicy,
  facts: Facts,
  step: RouteStep = routeStep(compiled, facts.method, facts.path),
): Plan {
  if ("done" in step) return { kind: "done", decision: step.done };
  const { route } = step;
  const { token } = facts;
  const subject = ipSubject(facts.ip);
  if (route.token === "required" && token?.ok === true) {
    const { claims } = token;
    const rules = compiled.byCategory.get(route.category) ?? NO_RULES;
    const external = claims.external;
    // A provider token's tier counts when the policy knows it; otherwise EXTERNAL_DEFAULT_TIER.
    const claimTier =
      external?.kind === "provider" && !rules.has(claims.tier)
        ? (facts.externalDefaultTier ?? "")
        : claims.tier;
    return {
      kind: "user",
      userId: claims.sub,
      sessionId: claims.sid,
      claimTier,
      category: route.category,
      rules,
      subject: external === undefined ? userSubject(claims.sub) : external.subject,
      proof:
        external === undefined
          ? undefined
          : external.kind === "key"
            ? { kind: "key", hash: external.hash, markUsed: false, refusedUsers: undefined }
            : { kind: "subject", tier: claimTier },
      cacheId: external?.kind === "key" ? external.hash : claims.sid,
      expiresAtMs: claims.exp * 1000,
      ip:
        compiled.ip === undefined
          ? undefined
          : { subject, rule: compiled.ip.rule, shadow: compiled.ip.mode === "shadow" },
    };
  }
  // No token, a bad one, or a route that takes none: counted against the client's address.
  const anonymous = compiled.anonymous.get(route.category) as NamedRule;
  const named = compiled.ip === undefined ? [anonymous] : [compiled.ip, anonymous];
  return {
    kind: "anonymous",
    subject,
    category: route.category,
    // A full shadow layer refuses nothing: the enforced ones still decide and count.
    layers: named.map((n) => ({ subject, category: n.category, rule: n.rule, shadow: n.mode === "shadow" })),
    named,
    tokenRequired: route.token === "required",
    token,
  };
}
