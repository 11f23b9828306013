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

function firstMatch(table: RouteTable, method: string, path: string): RouteRule | undefined {
  for (const route of table.routes) {
    if (route.method !== undefined && route.method !== method) continue;
    if (route.prefix) {
      if (path === route.path || (path.startsWith(route.path) && path.charCodeAt(route.path.length) === 47)) {
        return route;
      }
    } else if (path === route.path) {
      return route;
    }
  }
  return undefined;
}

/**
 * The path without a format suffix on its last segment (`/api/search.json` → `/api/search`), or
 * undefined when it has none: Rails (`(.:format)` on every route), Spring MVC's suffix pattern match
 * and Django REST framework's format suffixes serve `/api/search.json` by the `/api/search` route.
 */
function withoutSuffix(path: string): string | undefined {
  const segment = path.lastIndexOf("/") + 1;
  const dot = path.indexOf(".", segment);
  return dot > segment ? path.slice(0, dot) : undefined;
}

/**
 * The first route that matches wins; otherwise, for a path with a format suffix, the first route of
 * the path without it (a route written for the suffixed path still wins, being found first), so
 * that `/api/search.json` is charged as the search an upstream may serve it as; otherwise the
 * policy's default. The suffixed path takes that route only when it is limited and asks for a token
 * whenever the default does: no upstream resource that the default guards is opened by a suffix
 * (`/health.json` does not become unlimited, nor `/auth/login.json` tokenless). `path` must be
 * normalized.
 */
export function matchRoute(table: RouteTable, method: string, path: string): RouteRule {
  // HEAD is answered by GET handlers upstream, so it is limited as GET.
  const m = method === "HEAD" ? "GET" : method;
  const route = firstMatch(table, m, path);
  if (route !== undefined) return route;
  // Only a path no route took pays for this.
  const stem = withoutSuffix(path);
  const fallback = stem === undefined ? undefined : firstMatch(table, m, stem);
  const { defaultRule } = table;
  if (fallback?.limited === true && (fallback.token === "required" || defaultRule.token === "none"))
    return fallback;
  return defaultRule;
}
