// Routes: what a matched request asks of the check, and matching a method and path to a route.
import { canonicalTarget } from "./request-target.js";

export type TokenRule = "required" | "none";

/** What a matched route asks of the check. `category` is empty only when `limited` is false. */
export type RouteRule = {
  category: string;
  token: TokenRule;
  limited: boolean;
};

/** A policy route: exact, or a prefix (`path` then holds it without the trailing "/*"). */
export type Route = RouteRule & { method: string | undefined; path: string; prefix: boolean };

/** What matching needs of a policy. */
export type RouteTable = { routes: readonly Route[]; defaultRule: RouteRule };

/**
 * A path as the policy sees it (see canonicalTarget). Only for paths known to be acceptable, such as
 * the policy's own routes; a refused one comes back lower-cased, so it matches nothing by accident.
 */
export function normalizePath(raw: string): string {
  const target = canonicalTarget(raw);
  return target.ok ? target.path : raw.toLowerCase();
}

/** The first route that matches wins; otherwise the policy's default. `path` must be normalized. */
export function matchRoute(table: RouteTable, method: string, path: string): RouteRule {
  // HEAD is answered by GET handlers upstream, so it is limited as GET.
  const m = method === "HEAD" ? "GET" : method;
  for (const route of table.routes) {
    if (route.method !== undefined && route.method !== m) continue;
    if (route.prefix) {
      if (path === route.path || (path.startsWith(route.path) && path.charCodeAt(route.path.length) === 47)) {
        return route;
      }
    } else if (path === route.path) {
      return route;
    }
  }
  return table.defaultRule;
}
