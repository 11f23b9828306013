// The decision core: request facts and the store's answer in, a Decision out. No HTTP, no Redis.
import type { TokenCheck } from "../auth/jwt.js";
import type { Identity } from "../auth/types.js";
import { ANONYMOUS_TIER, durationText, type Policy, type PolicyMode } from "../config/policy.js";
import { canonicalTarget } from "../config/request-target.js";
import { matchRoute, type RouteRule } from "../config/routes.js";
import { type HitResult, IP_LAYER, ipSubject, type Layer, type Rule } from "../ratelimit/types.js";
import type { AuthorizeResult, TierRules } from "./types.js";

/**
 * A rule under the name the RateLimit headers give it: `"<tier>-<category>"`, or `"ip"` for the
 * per-address layer. Built once per rule, so that answers built from it are prepared once.
 */
export type NamedRule = {
  name: string;
  /** Per window: its quoted name (the first window's is the plain name, the others add their length). */
  windowNames: readonly string[];
  category: string;
  rule: Rule;
  mode: PolicyMode;
};

/** The limit that applied: the described window's state after this request, and every layer's rule. */
export type LimitState = HitResult & {
  tier: string;
  /** The described layer's category: the route's, or `ip`. */
  category: string;
  described: NamedRule;
  /** Every layer the request was counted against (for RateLimit-Policy), in evaluation order. */
  layers: readonly NamedRule[];
  /** The window was full but the layer is in shadow mode: allowed, and marked. */
  shadow: boolean;
};

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
      /** The IP layer (when the policy has one), then the anonymous tier's rule for the category. */
      layers: readonly Layer[];
      named: readonly NamedRule[];
      tokenRequired: boolean;
      token: TokenCheck | undefined;
    }
  | {
      kind: "user";
      userId: string;
      sessionId: string;
      claimTier: string;
      category: string;
      rules: TierRules;
      /** The IP layer; `shadow`: over it only marks, the session and the user's layer decide. */
      ip: { subject: string; rule: Rule; shadow: boolean } | undefined;
    };

export type CompiledPolicy = {
  policy: Policy;
  /** Per category, the anonymous tier's rule. */
  anonymous: ReadonlyMap<string, NamedRule>;
  /** Per category, the rule of every named tier, as the store receives it. */
  byCategory: ReadonlyMap<string, TierRules>;
  ip: NamedRule | undefined;
  /** The named rule of a tier's category, or of a user's own rule (built once per rule object). */
  named(tier: string, category: string, own: Rule | undefined): NamedRule;
};

function nameRule(name: string, category: string, rule: Rule, mode: PolicyMode): NamedRule {
  const windowNames = rule.windows.map(
    (w, i) => `"${i === 0 ? name : `${name}-${durationText(w.windowMs)}`}"`,
  );
  return { name, windowNames, category, rule, mode };
}

export function compilePolicy(policy: Policy): CompiledPolicy {
  const modeOf = (tier: string): PolicyMode => policy.modes.get(tier) ?? "enforce";
  const named = new Map<string, NamedRule>();
  for (const [tier, rules] of policy.tiers) {
    for (const [category, rule] of rules) {
      named.set(`${tier}|${category}`, nameRule(`${tier}-${category}`, category, rule, modeOf(tier)));
    }
  }
  const anonymous = new Map<string, NamedRule>();
  for (const category of policy.tiers.get(ANONYMOUS_TIER)?.keys() ?? []) {
    anonymous.set(category, named.get(`${ANONYMOUS_TIER}|${category}`) as NamedRule);
  }
  const byCategory = new Map<string, Map<string, Rule>>();
  for (const [tier, rules] of policy.tiers) {
    if (tier === ANONYMOUS_TIER) continue;
    for (const [category, rule] of rules) {
      let table = byCategory.get(category);
      if (table === undefined) {
        table = new Map();
        byCategory.set(category, table);
      }
      table.set(tier, rule);
    }
  }
  const own = new WeakMap<Rule, NamedRule>();
  const ip = policy.ip === undefined ? undefined : nameRule(IP_LAYER, IP_LAYER, policy.ip, policy.ipMode);
  return {
    policy,
    anonymous,
    byCategory,
    ip,
    named(tier, category, ownRule) {
      if (ownRule !== undefined) {
        let n = own.get(ownRule);
        if (n === undefined) {
          n = nameRule(`${tier}-${category}`, category, ownRule, modeOf(tier));
          own.set(ownRule, n);
        }
        return n;
      }
      let n = named.get(`${tier}|${category}`);
      if (n === undefined) {
        // A tier the policy does not name (the store answered with an old one): nothing to enforce by.
        n = nameRule(`${tier}-${category}`, category, { algorithm: "sliding-log", windows: [] }, "enforce");
        named.set(`${tier}|${category}`, n);
      }
      return n;
    },
  };
}

const NO_RULES: TierRules = new Map();

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
  const subject = ipSubject(facts.ip);
  if (route.token === "required" && token?.ok === true) {
    return {
      kind: "user",
      userId: token.claims.sub,
      sessionId: token.claims.sid,
      claimTier: token.claims.tier,
      category: route.category,
      rules: compiled.byCategory.get(route.category) ?? NO_RULES,
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
    layers: named.map((n) => ({ category: n.category, rule: n.rule, shadow: n.mode === "shadow" })),
    named,
    tokenRequired: route.token === "required",
    token,
  };
}

/** One object shape for every limit state (no spreads on the check path). */
function limitState(hit: HitResult, tier: string, layers: readonly NamedRule[], shadow: boolean): LimitState {
  const described = layers[hit.layer] as NamedRule;
  return {
    allowed: hit.allowed,
    layer: hit.layer,
    window: hit.window,
    limit: hit.limit,
    windowMs: hit.windowMs,
    used: hit.used,
    remaining: hit.remaining,
    resetAtMs: hit.resetAtMs,
    retryAfterMs: hit.retryAfterMs,
    tier,
    category: described.category,
    described,
    layers,
    shadow,
  };
}

const allowAnonymous = (limit: LimitState | undefined): Decision => ({
  kind: "allow",
  identity: undefined,
  limit,
  degraded: false,
});

/** A full window: refused, or, when the layer that refused is in shadow mode, allowed and marked. */
function overLimit(limit: LimitState, identity: Identity | undefined): Decision {
  if (limit.described.mode === "shadow") {
    limit.shadow = true;
    return { kind: "allow", identity, limit, degraded: false };
  }
  return { kind: "deny", status: 429, limit, identity };
}

/** Step 2's outcome once the anonymous layers answered. */
export function decideAnonymous(p: Extract<Plan, { kind: "anonymous" }>, hit: HitResult): Decision {
  const limit = limitState(hit, ANONYMOUS_TIER, p.named, false);
  if (!hit.allowed) {
    const over = overLimit(limit, undefined);
    if (over.kind === "deny") return over;
  }
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
export function decideUser(
  compiled: CompiledPolicy,
  p: Extract<Plan, { kind: "user" }>,
  answer: AuthorizeResult,
): Decision {
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
    case "ip_denied": {
      // The address's refusal, made before the session was looked at: it names the requester's
      // tier as the token states it (its signature was checked), and no identity. A cached one is
      // decided here as well, for each requester, so it never names whoever filled the layer.
      // Never a pass, whatever the layer's mode now: nothing vouched for the session. (A shadow
      // layer never answers this: the store then checks the session and counts the user's layer.)
      const limit = limitState(answer.hit, p.claimTier, [compiled.ip as NamedRule], false);
      return { kind: "deny", status: 429, limit, identity: undefined };
    }
    case "ok": {
      const identity: Identity = { userId: p.userId, tier: answer.tier, sessionId: p.sessionId };
      const mine = compiled.named(answer.tier, p.category, answer.ownRule);
      const layers = p.ip === undefined ? [mine] : [compiled.ip as NamedRule, mine];
      const limit = limitState(answer.hit, answer.tier, layers, false);
      if (!answer.hit.allowed) return overLimit(limit, identity);
      return { kind: "allow", identity, limit, degraded: false };
    }
  }
}

/**
 * The store is down or too slow: FAILURE_MODE decides for a valid token. A limited route that takes
 * no token (login) has the address's window as its only protection, which cannot be counted now:
 * 503 in either mode, or credential stuffing would be unlimited while Redis is slow (and a login
 * needs the store anyway).
 */
export function decideDegraded(p: Plan, failureMode: "open" | "closed"): Decision {
  if (failureMode === "closed") return { kind: "deny", status: 503 };
  if (p.kind === "anonymous" && !p.tokenRequired) return { kind: "deny", status: 503 };
  if (p.kind === "user") {
    const identity: Identity = { userId: p.userId, tier: p.claimTier, sessionId: p.sessionId };
    return { kind: "allow", identity, limit: undefined, degraded: true };
  }
  if (p.kind === "anonymous" && p.tokenRequired) {
    // The token is still judged: an invalid one gets 401 even without the store.
    const described = p.named[p.named.length - 1] as NamedRule;
    const window = described.rule.windows[0];
    const fake: HitResult = {
      allowed: true,
      layer: p.named.length - 1,
      window: 0,
      limit: window?.limit ?? 0,
      windowMs: window?.windowMs ?? 0,
      used: 0,
      remaining: window?.limit ?? 0,
      resetAtMs: 0,
      retryAfterMs: 0,
    };
    const decision = decideAnonymous(p, fake);
    if (decision.kind === "allow") return { ...decision, limit: undefined, degraded: true };
    return decision;
  }
  return { kind: "allow", identity: undefined, limit: undefined, degraded: true };
}
