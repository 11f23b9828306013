// Renders a Decision as an HTTP check's answer (status, headers, body): pure, a new answer per call.
// This is Envoy's shape; other protocols reshape it (nginx.ts) or take its parts (a denied_response).
import type { Decision, LimitState } from "../check/types.js";
import { bearerChallenge } from "../http/errors.js";
import { type PreparedWindow, policyHeader, preparedWindow } from "./prepared.js";

export type CheckResponse = { status: number; headers: Record<string, string>; body: string };

const EMPTY_IDENTITY = { "x-user-id": "", "x-user-tier": "", "x-session-id": "" };

function limitHeaders(limit: LimitState, prepared: PreparedWindow, nowMs: number): Record<string, string> {
  // Reset is in the store's clock (µs), now in this process's (whole ms): a millisecond of slack
  // keeps a reset one window ahead from reading as one second more.
  const resetIn = Math.max(0, Math.ceil((limit.resetAtMs - nowMs - 1) / 1000));
  const remaining = limit.shadow ? "0" : String(limit.remaining);
  const headers: Record<string, string> = {
    "x-ratelimit-limit": prepared.limitText,
    "x-ratelimit-remaining": remaining,
    "x-ratelimit-used": String(limit.used),
    "x-ratelimit-reset": String(Math.ceil(limit.resetAtMs / 1000)),
    "x-ratelimit-resource": limit.category,
    "ratelimit-policy": policyHeader(limit.layers),
    ratelimit: `${prepared.name};r=${remaining};t=${resetIn}`,
  };
  if (limit.shadow) headers["x-ratelimit-shadow"] = "deny";
  return headers;
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
        Object.assign(headers, limitHeaders(decision.limit, preparedWindow(decision.limit), nowMs));
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
          const rule = preparedWindow(decision.limit);
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
