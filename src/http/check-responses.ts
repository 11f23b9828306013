// Renders a Decision as the check listener's answer: status, headers and body, for Envoy and nginx.
import type { Decision, LimitState } from "../authz/decide.js";
import { bearerChallenge } from "./errors.js";

export type CheckResponse = { status: number; headers: Record<string, string>; body: string };

const EMPTY_IDENTITY = { "x-user-id": "", "x-user-tier": "", "x-session-id": "" };

function limitHeaders(limit: LimitState, nowMs: number): Record<string, string> {
  const name = `"${limit.tier}-${limit.category}"`;
  const windowSeconds = Math.ceil(limit.windowMs / 1000);
  const resetIn = Math.max(0, Math.ceil((limit.resetAtMs - nowMs) / 1000));
  return {
    "x-ratelimit-limit": String(limit.limit),
    "x-ratelimit-remaining": String(limit.remaining),
    "x-ratelimit-used": String(limit.used),
    "x-ratelimit-reset": String(Math.ceil(limit.resetAtMs / 1000)),
    "x-ratelimit-resource": limit.category,
    "ratelimit-policy": `${name};q=${limit.limit};w=${windowSeconds}`,
    ratelimit: `${name};r=${limit.remaining};t=${resetIn}`,
  };
}

export function retryAfterSeconds(limit: LimitState): number {
  return Math.max(1, Math.ceil(limit.retryAfterMs / 1000));
}

function rateLimitBody(limit: LimitState): string {
  // Built as text: tier and category are policy names ([a-z0-9_-]) and the rest are numbers.
  const seconds = retryAfterSeconds(limit);
  const windowSeconds = Math.ceil(limit.windowMs / 1000);
  const { tier, category } = limit;
  return (
    `{"error":"rate_limit_exceeded","message":"Rate limit exceeded: ${limit.limit} ${category} requests per ` +
    `${windowSeconds} seconds for tier ${tier}. Retry in ${seconds} seconds.","retry_after_seconds":${seconds},` +
    `"category":"${category}","tier":"${tier}","limit":${limit.limit},"window_seconds":${windowSeconds}}`
  );
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
      if (decision.limit !== undefined) Object.assign(headers, limitHeaders(decision.limit, nowMs));
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
        case 429:
          return {
            status: 429,
            headers: {
              "content-type": "application/json",
              ...limitHeaders(decision.limit, nowMs),
              "retry-after": String(retryAfterSeconds(decision.limit)),
            },
            body: rateLimitBody(decision.limit),
          };
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
