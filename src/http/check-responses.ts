// Renders a Decision as the check listener's answer: status, headers and body, for Envoy and nginx.
import type { Decision, LimitState } from "../authz/decide.js";
import { bearerChallenge } from "./errors.js";

export type CheckResponse = { status: number; headers: Record<string, string>; body: string };

const EMPTY_IDENTITY = { "x-user-id": "", "x-user-tier": "", "x-session-id": "" };

/**
 * What a limit's answers share, prepared once per rule (tier, category, limit, window) instead of on
 * every check: the header values that do not change and the constant parts of the 429 body, which
 * then only needs its retry seconds spliced in. A denial is the traffic a limiter must absorb
 * cheaply (a client hammering after its 429), so its answer costs no more to build than an allow's.
 */
type PreparedRule = {
  limit: number;
  windowMs: number;
  limitText: string;
  /** `"tier-category"`, the quoted policy name of the RateLimit headers. */
  name: string;
  policy: string;
  deniedUsed: string;
  /** The 429 body is head + seconds + middle + seconds + tail. */
  head: string;
  middle: string;
  tail: string;
};

/** Bounded: rules come from the policy, so this only matters if tiers or categories ever churn. */
const MAX_PREPARED = 1024;
const prepared = new Map<string, Map<string, PreparedRule>>();

function prepare(limit: LimitState): PreparedRule {
  let byCategory = prepared.get(limit.tier);
  const cached = byCategory?.get(limit.category);
  if (cached !== undefined && cached.limit === limit.limit && cached.windowMs === limit.windowMs)
    return cached;
  const { tier, category } = limit;
  const windowSeconds = Math.ceil(limit.windowMs / 1000);
  const name = `"${tier}-${category}"`;
  // Built as text: tier and category are policy names ([a-z0-9_-]) and the rest are numbers.
  const rule: PreparedRule = {
    limit: limit.limit,
    windowMs: limit.windowMs,
    limitText: String(limit.limit),
    name,
    policy: `${name};q=${limit.limit};w=${windowSeconds}`,
    deniedUsed: String(limit.limit),
    head:
      `{"error":"rate_limit_exceeded","message":"Rate limit exceeded: ${limit.limit} ${category} requests per ` +
      `${windowSeconds} seconds for tier ${tier}. Retry in `,
    middle: ' seconds.","retry_after_seconds":',
    tail: `,"category":"${category}","tier":"${tier}","limit":${limit.limit},"window_seconds":${windowSeconds}}`,
  };
  if (byCategory === undefined) {
    if (prepared.size >= MAX_PREPARED) prepared.clear();
    byCategory = new Map();
    prepared.set(tier, byCategory);
  }
  if (byCategory.size >= MAX_PREPARED) byCategory.clear();
  byCategory.set(category, rule);
  return rule;
}

function limitHeaders(limit: LimitState, rule: PreparedRule, nowMs: number): Record<string, string> {
  const resetIn = Math.max(0, Math.ceil((limit.resetAtMs - nowMs) / 1000));
  const remaining = String(limit.remaining);
  return {
    "x-ratelimit-limit": rule.limitText,
    "x-ratelimit-remaining": remaining,
    "x-ratelimit-used": limit.used === rule.limit ? rule.deniedUsed : String(limit.used),
    "x-ratelimit-reset": String(Math.ceil(limit.resetAtMs / 1000)),
    "x-ratelimit-resource": limit.category,
    "ratelimit-policy": rule.policy,
    ratelimit: `${rule.name};r=${remaining};t=${resetIn}`,
  };
}

export function retryAfterSeconds(limit: LimitState): number {
  return Math.max(1, Math.ceil(limit.retryAfterMs / 1000));
}

/** The answer as Envoy's ext_authz expects it: 200 allows; any other status and body go to the client. */
export function renderDecision(decision: Decision, nowMs: number): CheckResponse {
  switch (decision.kind) {
    case "allow": {
      const headers: Record<string, string> =
        decision.identity === undefined
          ? { ...EMPTY_IDENTITY }
          : {
              "x-user-id": decision.identity.userId,
              "x-user-tier": decision.identity.tier,
              "x-session-id": decision.identity.sessionId,
            };
      if (decision.limit !== undefined) {
        Object.assign(headers, limitHeaders(decision.limit, prepare(decision.limit), nowMs));
      }
      if (decision.degraded) headers["x-ratelimit-degraded"] = "true";
      return { status: 200, headers, body: "" };
    }
    case "deny":
      switch (decision.status) {
        case 401:
          return {
            status: 401,
            headers: {
              "content-type": "application/json",
              "www-authenticate": bearerChallenge(decision.tokenSent ? decision.description : undefined),
            },
            body: JSON.stringify({ error: "unauthorized", message: decision.description }),
          };
        case 429: {
          const rule = prepare(decision.limit);
          const headers = limitHeaders(decision.limit, rule, nowMs);
          const seconds = String(retryAfterSeconds(decision.limit));
          headers["content-type"] = "application/json";
          headers["retry-after"] = seconds;
          return { status: 429, headers, body: rule.head + seconds + rule.middle + seconds + rule.tail };
        }
        case 400:
          return {
            status: 400,
            headers: { "content-type": "application/json" },
            body: JSON.stringify({ error: "bad_request", message: decision.description }),
          };
        case 503:
          return {
            status: 503,
            headers: { "content-type": "application/json", "retry-after": "1" },
            body: JSON.stringify({ error: "unavailable", message: "The rate-limit store is unavailable" }),
          };
      }
  }
}

/**
 * nginx's auth_request passes only 2xx, 401 and 403: a 400, 414, 429 or 503 becomes 403 with the real status
 * in X-Authz-Status, and every denial carries its JSON body in X-Authz-Body for nginx to send.
 * auth_request never reads a body, so none is sent: an empty one keeps the connection reusable.
 */
export function renderForNginx(decision: Decision, nowMs: number): CheckResponse {
  return forNginx(renderDecision(decision, nowMs));
}

/** Any check answer, reshaped for auth_request. */
export function forNginx(response: CheckResponse): CheckResponse {
  if (response.status === 200) return response;
  const headers = response.headers;
  headers["x-authz-status"] = String(response.status);
  headers["x-authz-body"] = response.body;
  return { status: response.status === 401 ? 401 : 403, headers, body: "" };
}
