// Route matching: request method and path to the policy's category and token rule.
import type { Policy, RouteRule } from "./policy.js";
import { canonicalTarget } from "./request-target.js";

/**
 * A path as the policy sees it (see canonicalTarget). Only for paths known to be acceptable, such as
 * the policy's own routes; a refused one comes back lower-cased, so it matches nothing by accident.
 */
export function normalizePath(raw: string): string {
  const target = canonicalTarget(raw);
  return target.ok ? target.path : raw.toLowerCase();
}

/** The first route that matches wins; otherwise the policy's default. `path` must be normalized. */
export function matchRoute(policy: Policy, method: string, path: string): RouteRule {
  // HEAD is answered by GET handlers upstream, so it is limited as GET.
  const m = method === "HEAD" ? "GET" : method;
  for (const route of policy.routes) {
    if (route.method !== undefined && route.method !== m) continue;
    if (route.prefix) {
      if (path === route.path || (path.startsWith(route.path) && path.charCodeAt(route.path.length) === 47)) {
        return route;
      }
    } else if (path === route.path) {
      return route;
    }
  }
  return policy.defaultRule;
}
