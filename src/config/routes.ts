// Route matching: request method and path to the policy's category and token rule.
import type { Policy, RouteRule } from "./policy.js";

const NEEDS_WORK = /[%A-Z]|\/\/|\/\.|.\/$|[?#]/;

function decodeUnreserved(path: string): string {
  // Only unreserved characters are decoded, so "%2F" stays distinct from a real separator.
  return path.replace(/%([0-9A-Fa-f]{2})/g, (whole, hex: string) => {
    const char = String.fromCharCode(Number.parseInt(hex, 16));
    return /[A-Za-z0-9\-._~]/.test(char) ? char : whole.toUpperCase();
  });
}

/**
 * The path as the policy sees it: without query or fragment, lower-case, with unreserved
 * percent-escapes decoded, repeated slashes merged, dot segments resolved and no trailing slash.
 * Upstreams (express among them) treat these spellings as one path, so the limiter must too.
 */
export function normalizePath(raw: string): string {
  if (!NEEDS_WORK.test(raw) && raw.startsWith("/")) return raw;
  let path = raw;
  const cut = path.search(/[?#]/);
  if (cut !== -1) path = path.slice(0, cut);
  path = decodeUnreserved(path.toLowerCase());
  const out: string[] = [];
  for (const segment of path.split("/")) {
    if (segment === "" || segment === ".") continue;
    if (segment === "..") out.pop();
    else out.push(segment);
  }
  return `/${out.join("/")}`;
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
