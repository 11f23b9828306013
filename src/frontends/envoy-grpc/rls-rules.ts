// The configuration in force (src/rls/) as the rate limit service's front end reads it: per request
// descriptor, the matched limit as a limiter rule and the subject its counter is kept under.
import { MAX_COUNT } from "../../config/rules.js";
import type { Rule } from "../../ratelimit/types.js";
import { dropReplaced, limitOf, subjectOf } from "../../rls/match.js";
import type { RequestDescriptor, RlsConfig, RlsDomain, RlsLimit } from "../../rls/model.js";
import type { RlsLimitView, RlsMatch, RlsResolution, RlsRules } from "./rls.js";
import { RLS_UNITS } from "./rls-input.js";

/**
 * Each rule's view, made once per rule object: a reload makes new rules and the old views go with
 * them; a rule made for one request (a descriptor's own limit) takes its view along when it goes.
 */
const views = new WeakMap<RlsLimit, RlsLimitView>();

function viewOf(limit: RlsLimit): RlsLimitView {
  let view = views.get(limit);
  if (view === undefined) {
    // A descriptor's own limit (a request's override) takes the default algorithm whatever its
    // size: past what a log may hold, it is counted as a sliding counter instead.
    const algorithm =
      limit.algorithm === "sliding-log" && limit.requestsPerUnit > MAX_COUNT
        ? "sliding-counter"
        : limit.algorithm;
    const rule: Rule = { algorithm, windows: [{ limit: limit.requestsPerUnit, windowMs: limit.windowMs }] };
    view = {
      id: limit.id,
      name: limit.name,
      unit: limit.unit,
      requestsPerUnit: limit.requestsPerUnit,
      rule,
      unlimited: limit.unlimited,
      shadowMode: limit.shadowMode,
      quotaMode: limit.quotaMode,
      statsKey: limit.statsKey,
      currentLimit:
        limit.name === undefined
          ? { requests_per_unit: limit.requestsPerUnit, unit: RLS_UNITS[limit.unit] }
          : { name: limit.name, requests_per_unit: limit.requestsPerUnit, unit: RLS_UNITS[limit.unit] },
      // A descriptor's own limit (a request's override) counts under the rule's counter, and a
      // refusal under 1 a minute says nothing of a request that brings its own 1000 a minute.
      refusalKey: `${limit.id}:${limit.requestsPerUnit}`,
    };
    views.set(limit, view);
  }
  return view;
}

/** A descriptor's match, with the rule its `replaces` is read from. */
type Match = RlsMatch & { rule: RlsLimit };
const ruleOf = (match: Match): RlsLimit => match.rule;
/** A descriptor resolved: its match before `replaces`, and a request of it alone, resolved. */
type Resolved = { match: Match | undefined; alone: RlsResolution };

/**
 * How many one-entry descriptors a configuration keeps resolved (Envoy's usual descriptor: one
 * key and value). Once full it keeps what it has and resolves the others each time: a stream of
 * distinct values (addresses, user ids) neither grows it nor churns it.
 */
const MAX_RESOLVED = 10_000;

function resolverOf(config: RlsConfig): RlsRules {
  /** domain → key → value → the one-entry descriptor without its own limit, resolved. */
  const resolved = new Map<string, Map<string, Map<string, Resolved>>>();
  let size = 0;

  const resolve = (rls: RlsDomain, descriptor: RequestDescriptor): Resolved => {
    const rule = limitOf(config, rls, descriptor);
    let match: Match | undefined;
    if (rule !== undefined) {
      const limit = viewOf(rule);
      const subject = subjectOf(rls.domain, descriptor, rule);
      const layer = { subject, category: limit.id, rule: limit.rule, shadow: limit.shadowMode };
      match = { limit, subject, layer, rule };
    }
    const limits = [match];
    dropReplaced(limits, ruleOf);
    return { match, alone: { allOrNone: rls.allOrNone, limits } };
  };

  const resolvedOf = (rls: RlsDomain, descriptor: RequestDescriptor): Resolved => {
    const entry = descriptor.entries[0];
    if (descriptor.limit !== undefined || entry === undefined || descriptor.entries.length !== 1) {
      return resolve(rls, descriptor);
    }
    const values = resolved.get(rls.domain)?.get(entry.key);
    let found = values?.get(entry.value);
    if (found === undefined) {
      found = resolve(rls, descriptor);
      if (size < MAX_RESOLVED) {
        let keys = resolved.get(rls.domain);
        if (keys === undefined) {
          keys = new Map();
          resolved.set(rls.domain, keys);
        }
        let byValue = keys.get(entry.key);
        if (byValue === undefined) {
          byValue = new Map();
          keys.set(entry.key, byValue);
        }
        byValue.set(entry.value, found);
        size += 1;
      }
    }
    return found;
  };

  return {
    resolve(domain, descriptors) {
      const rls = config.domains.get(domain);
      if (rls === undefined) return { allOrNone: false, limits: descriptors.map(() => undefined) };
      if (descriptors.length === 1) return resolvedOf(rls, descriptors[0] as RequestDescriptor).alone;
      const limits = descriptors.map((descriptor) => resolvedOf(rls, descriptor).match);
      dropReplaced(limits, ruleOf);
      return { allOrNone: rls.allOrNone, limits };
    },
  };
}

/** The rules of the configuration in force, made once per configuration (a reload makes new ones). */
export function rlsRules(config: () => RlsConfig): () => RlsRules {
  let current: RlsConfig | undefined;
  let rules: RlsRules | undefined;
  return () => {
    const now = config();
    if (now !== current || rules === undefined) {
      current = now;
      rules = resolverOf(now);
    }
    return rules;
  };
}
