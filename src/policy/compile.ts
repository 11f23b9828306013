// The policy compiled for checks: each rule under the name the RateLimit headers give it, the rules of
// a category per tier as the store receives them, and the route of a request target.
import { durationText, IP_LAYER, type Rule, type TierRules } from "../config/rules.js";
import { ANONYMOUS_TIER, type Policy, type PolicyMode } from "./policy.js";
import { canonicalTarget } from "./request-target.js";
import { matchRoute, type RouteRule } from "./routes.js";

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

/** The route of a request target; a string names why the target is refused. */
export function routeFor(compiled: CompiledPolicy, method: string, rawTarget: string): RouteRule | string {
  const target = canonicalTarget(rawTarget);
  if (!target.ok) return target.problem;
  return matchRoute(compiled.policy, method.toUpperCase(), target.path);
}
