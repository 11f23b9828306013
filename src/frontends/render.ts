// Renders a Decision as the check listener's answer: status, headers and body, for Envoy and nginx.

import type { Decision, LimitState } from "../check/types.js";
import { bearerChallenge } from "../http/errors.js";
import type { NamedRule } from "../policy/compile.js";
import { IP_LAYER } from "../ratelimit/types.js";

export type CheckResponse = { status: number; headers: Record<string, string>; body: string };

const EMPTY_IDENTITY = { "x-user-id": "", "x-user-tier": "", "x-session-id": "" };

/**
 * What a window's answers share, prepared once per (rule, window, tier) instead of on every check:
 * the header values that do not change and the constant parts of the 429 body, which then only
 * needs its retry seconds spliced in. A denial is the traffic a limiter must absorb cheaply (a
 * client hammering after its 429), so its answer costs no more to build than an allow's.
 */
type PreparedWindow = {
  limitText: string;
  /** The window's quoted name in the RateLimit headers. */
  name: string;
  /** The 429 body is head + seconds + middle + seconds + tail. */
  head: string;
  middle: string;
  tail: string;
};

/** Bounded: rules come from the policy (and users' own rules), so this only matters if they churn. */
const MAX_PREPARED = 4096;
const preparedWindows = new WeakMap<NamedRule, Map<string, PreparedWindow>>();
const policies = new WeakMap<NamedRule, Map<NamedRule | undefined, string>>();

function prepareWindow(limit: LimitState): PreparedWindow {
  const rule = limit.described;
  let byKey = preparedWindows.get(rule);
  if (byKey === undefined) {
    byKey = new Map();
    preparedWindows.set(rule, byKey);
  }
  const key = `${limit.window}|${limit.tier}`;
  let prepared = byKey.get(key);
  if (prepared !== undefined) return prepared;
  const windowSeconds = Math.ceil(limit.windowMs / 1000);
  const { tier, category } = limit;
  // Built as text: tier and category are policy names ([a-z0-9_-]) and the rest are numbers.
  const what =
    category === IP_LAYER
      ? `${limit.limit} requests per ${windowSeconds} seconds from this address`
      : `${limit.limit} ${category} requests per ${windowSeconds} seconds for tier ${tier}`;
  prepared = {
    limitText: String(limit.limit),
    name: rule.windowNames[limit.window] ?? `"${rule.name}"`,
    head: `{"error":"rate_limit_exceeded","message":"Rate limit exceeded: ${what}. Retry in `,
    middle: ' seconds.","retry_after_seconds":',
    tail: `,"category":"${category}","tier":"${tier}","limit":${limit.limit},"window_seconds":${windowSeconds}}`,
  };
  if (byKey.size >= MAX_PREPARED) byKey.clear();
  byKey.set(key, prepared);
  return prepared;
}

/** RateLimit-Policy: every window of every layer the request was counted against. */
function policyHeader(layers: readonly NamedRule[]): string {
  const last = layers[layers.length - 1] as NamedRule;
  const first = layers.length > 1 ? layers[0] : undefined;
  let byFirst = policies.get(last);
  if (byFirst === undefined) {
    byFirst = new Map();
    policies.set(last, byFirst);
  }
  let header = byFirst.get(first);
  if (header === undefined) {
    header = layers
      .flatMap((layer) =>
        layer.rule.windows.map(
          (w, i) => `${layer.windowNames[i]};q=${w.limit};w=${Math.ceil(w.windowMs / 1000)}`,
        ),
      )
      .join(", ");
    if (byFirst.size >= MAX_PREPARED) byFirst.clear();
    byFirst.set(first, header);
  }
  return header;
}

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
        Object.assign(headers, limitHeaders(decision.limit, prepareWindow(decision.limit), nowMs));
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
          const rule = prepareWindow(decision.limit);
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
