// The configuration in force (src/rls/) as the rate limit service's front end reads it: per request
// descriptor, the matched limit as a limiter rule and the subject its counter is kept under.
import { MAX_COUNT } from "../../config/rules.js";
import type { Rule } from "../../ratelimit/types.js";
import { limitsFor, subjectOf } from "../../rls/match.js";
import type { RlsConfig, RlsLimit } from "../../rls/model.js";
import type { RlsLimitView, RlsRules } from "./rls.js";

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
    };
    views.set(limit, view);
  }
  return view;
}

export function rlsRules(config: () => RlsConfig): () => RlsRules {
  return () => {
    const current = config();
    return {
      resolve(domain, descriptors) {
        const limits = limitsFor(current, domain, descriptors);
        return {
          allOrNone: current.domains.get(domain)?.allOrNone ?? false,
          limits: limits.map((limit, i) =>
            limit === undefined
              ? undefined
              : { limit: viewOf(limit), subject: subjectOf(domain, descriptors[i] as never, limit) },
          ),
        };
      },
    };
  };
}
