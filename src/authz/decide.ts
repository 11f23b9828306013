// The decision core: request facts and the store's answer in, a Decision out. No HTTP, no Redis.
import type { TokenCheck } from "../auth/jwt.js";
import type { AuthorizeResult, TierLimits } from "../auth/types.js";
import { ANONYMOUS_TIER, type Policy, type RouteRule } from "../config/policy.js";
import { canonicalTarget } from "../config/request-target.js";
import { matchRoute } from "../config/routes.js";
import type { HitResult, Rule } from "../ratelimit/types.js";

export type Identity = { userId: string; tier: string; sessionId: string };

/** The limit that applied, with the window's state after this request. */
export type LimitState = HitResult & { tier: string; category: string; windowMs: number };

export type DenyReason = "missing" | "invalid" | "expired" | "revoked" | "inactive" | "unknown_tier";

export type Decision =
  | { kind: "allow"; identity: Identity | undefined; limit: LimitState | undefined; degraded: boolean }
  | { kind: "deny"; status: 401; reason: DenyReason; description: string; tokenSent: boolean }
  | { kind: "deny"; status: 429; limit: LimitState; identity: Identity | undefined }
  | { kind: "deny"; status: 400; description: string }
  | { kind: "deny"; status: 503 };

export type Facts = { method: string; path: string; token: TokenCheck | undefined; ip: string };

/** What the check must ask the store, if anything. */
export type Plan =
  | { kind: "done"; decision: Decision }
  | {
      kind: "anonymous";
      subject: string;
      category: string;
      rule: Rule;
      tokenRequired: boolean;
      token: TokenCheck | undefined;
    }
  | {
      kind: "user";
      userId: string;
      sessionId: string;
      claimTier: string;
      category: string;
      limits: TierLimits;
    };

export type CompiledPolicy = {
  policy: Policy;
  anonymous: ReadonlyMap<string, Rule>;
  /** Per category, the limit of every named tier, as the store receives it. */
  byCategory: ReadonlyMap<string, TierLimits>;
};

export function compilePolicy(policy: Policy): CompiledPolicy {
  const anonymous = new Map<string, Rule>();
  for (const [category, l] of policy.tiers.get(ANONYMOUS_TIER) ?? []) {
    anonymous.set(category, { limit: l.count, windowMs: l.windowMs });
  }
  const byCategory = new Map<string, Map<string, Rule>>();
  for (const [tier, limits] of policy.tiers) {
    if (tier === ANONYMOUS_TIER) continue;
    for (const [category, l] of limits) {
      let table = byCategory.get(category);
      if (table === undefined) {
        table = new Map();
        byCategory.set(category, table);
      }
      table.set(tier, { limit: l.count, windowMs: l.windowMs });
    }
  }
  return { policy, anonymous, byCategory };
}

const NO_LIMITS: TierLimits = new Map();

/** The route of a request target; a string names why the target is refused. */
export function routeFor(compiled: CompiledPolicy, method: string, rawTarget: string): RouteRule | string {
  const target = canonicalTarget(rawTarget);
  if (!target.ok) return target.problem;
  return matchRoute(compiled.policy, method.toUpperCase(), target.path);
}

/** Step 1 and 2 of the decision: the route, then the token. */
export function plan(compiled: CompiledPolicy, facts: Facts): Plan {
  const route = routeFor(compiled, facts.method, facts.path);
  if (typeof route === "string") {
    // Never counted as another route: an upstream could read this target as a different path.
    const description = `The request target is ambiguous: ${route}`;
    return { kind: "done", decision: { kind: "deny", status: 400, description } };
  }
  if (!route.limited) return { kind: "done", decision: allowAnonymous(undefined) };
  const { token } = facts;
  if (route.token === "required" && token?.ok === true) {
    return {
      kind: "user",
      userId: token.claims.sub,
      sessionId: token.claims.sid,
      claimTier: token.claims.tier,
      category: route.category,
      limits: compiled.byCategory.get(route.category) ?? NO_LIMITS,
    };
  }
  // No token, a bad one, or a route that takes none: counted against the client's address.
  const rule = compiled.anonymous.get(route.category) as Rule;
  return {
    kind: "anonymous",
    subject: `ip:${facts.ip}`,
    category: route.category,
    rule,
    tokenRequired: route.token === "required",
    token,
  };
}

/** One object shape for every limit state (no spreads on the check path). */
function limitState(hit: HitResult, tier: string, category: string, windowMs: number): LimitState {
  return {
    allowed: hit.allowed,
    limit: hit.limit,
    used: hit.used,
    remaining: hit.remaining,
    resetAtMs: hit.resetAtMs,
    retryAfterMs: hit.retryAfterMs,
    tier,
    category,
    windowMs,
  };
}

const allowAnonymous = (limit: LimitState | undefined): Decision => ({
  kind: "allow",
  identity: undefined,
  limit,
  degraded: false,
});

/** Step 2's outcome once the anonymous window answered. */
export function decideAnonymous(p: Extract<Plan, { kind: "anonymous" }>, hit: HitResult): Decision {
  const limit = limitState(hit, ANONYMOUS_TIER, p.category, p.rule.windowMs);
  if (!hit.allowed) return { kind: "deny", status: 429, limit, identity: undefined };
  if (!p.tokenRequired) return allowAnonymous(limit);
  if (p.token === undefined) {
    return {
      kind: "deny",
      status: 401,
      reason: "missing",
      description: "Authentication required",
      tokenSent: false,
    };
  }
  const reason: DenyReason = p.token.ok ? "invalid" : p.token.reason;
  const description = p.token.ok ? "invalid token" : p.token.description;
  return { kind: "deny", status: 401, reason, description, tokenSent: true };
}

/** Steps 3 and 4 once the store answered for a user. */
export function decideUser(p: Extract<Plan, { kind: "user" }>, answer: AuthorizeResult): Decision {
  switch (answer.kind) {
    case "no_session":
      return {
        kind: "deny",
        status: 401,
        reason: "revoked",
        description: "session expired or revoked",
        tokenSent: true,
      };
    case "user_inactive":
      return {
        kind: "deny",
        status: 401,
        reason: "inactive",
        description: "account disabled",
        tokenSent: true,
      };
    case "unknown_tier":
      return {
        kind: "deny",
        status: 401,
        reason: "unknown_tier",
        description: "account tier is not configured",
        tokenSent: true,
      };
    case "ok": {
      const identity: Identity = { userId: p.userId, tier: answer.tier, sessionId: p.sessionId };
      const windowMs = p.limits.get(answer.tier)?.windowMs ?? 0;
      const limit = limitState(answer.hit, answer.tier, p.category, windowMs);
      if (!answer.hit.allowed) return { kind: "deny", status: 429, limit, identity };
      return { kind: "allow", identity, limit, degraded: false };
    }
  }
}

/** The store is down or too slow: FAILURE_MODE decides. */
export function decideDegraded(p: Plan, failureMode: "open" | "closed"): Decision {
  if (failureMode === "closed") return { kind: "deny", status: 503 };
  if (p.kind === "user") {
    const identity: Identity = { userId: p.userId, tier: p.claimTier, sessionId: p.sessionId };
    return { kind: "allow", identity, limit: undefined, degraded: true };
  }
  if (p.kind === "anonymous" && p.tokenRequired) {
    const fake: HitResult = {
      allowed: true,
      limit: p.rule.limit,
      used: 0,
      remaining: p.rule.limit,
      resetAtMs: 0,
      retryAfterMs: 0,
    };
    return decideAnonymous(p, fake);
  }
  return { kind: "allow", identity: undefined, limit: undefined, degraded: true };
}
