// The spans of the proxy's calls: a check (`check <protocol>`) and a rate limit service call
// (`rls <transport>`), with what they decided as attributes; the store call inside is their child.
import {
  ATTR_HTTP_REQUEST_METHOD,
  ATTR_HTTP_RESPONSE_STATUS_CODE,
} from "@opentelemetry/semantic-conventions";
import type { Decision } from "../check/types.js";
import { decisionLabels } from "../metrics/check-observer.js";
import type { SpanAttributes, TraceHeaders, Tracing } from "./tracing.js";

/** The request id attribute: the proxy's x-request-id, the field every log line of the call carries. */
export const REQUEST_ID = "tollgate.request_id";

/** The HTTP status a front end answers a decision with (Envoy over gRPC: the denied_response's). */
const statusOf = (decision: Decision): number => (decision.kind === "allow" ? 200 : decision.status);

/** Only bounded values (the metrics' labels): never a token, a path, an address or a user id. */
function decisionAttributes(decision: Decision): SpanAttributes {
  const labels = decisionLabels(decision);
  return {
    "tollgate.decision": labels.decision,
    "tollgate.reason": labels.reason,
    "tollgate.tier": labels.tier,
    "tollgate.category": labels.category,
    [ATTR_HTTP_RESPONSE_STATUS_CODE]: statusOf(decision),
  };
}

/** The methods a span names as sent; any other is `_OTHER`, as OpenTelemetry's HTTP conventions say. */
const KNOWN_METHODS = new Set([
  "GET",
  "HEAD",
  "POST",
  "PUT",
  "DELETE",
  "CONNECT",
  "OPTIONS",
  "TRACE",
  "PATCH",
]);

/** A check of the proxied request `method …`, in a span that continues the proxy's trace. */
export function tracedCheck(
  tracing: Tracing,
  call: { protocol: string; caller: TraceHeaders; requestId: string | undefined; method: string },
  decide: () => Decision | Promise<Decision>,
): Promise<Decision> {
  const attributes: SpanAttributes = {
    "tollgate.protocol": call.protocol,
    // The caller's text, unbounded (nginx's X-Original-Method, a CheckRequest's method): never as sent.
    [ATTR_HTTP_REQUEST_METHOD]: KNOWN_METHODS.has(call.method) ? call.method : "_OTHER",
  };
  if (call.requestId !== undefined) attributes[REQUEST_ID] = call.requestId;
  return tracing.serve(`check ${call.protocol}`, call.caller, attributes, async (span) => {
    const decision = await decide();
    span?.setAttributes(decisionAttributes(decision));
    return decision;
  });
}

/** A rate limit service call (gRPC or POST /json) in a span; its answer's overall code as an attribute. */
export function tracedRls<T extends { overall_code: number }>(
  tracing: Tracing,
  call: { transport: string; caller: TraceHeaders; requestId: string | undefined; domain: string },
  decide: () => T | Promise<T>,
): Promise<T> {
  const attributes: SpanAttributes = { "tollgate.rls.domain": call.domain };
  if (call.requestId !== undefined) attributes[REQUEST_ID] = call.requestId;
  return tracing.serve(`rls ${call.transport}`, call.caller, attributes, async (span) => {
    const answer = await decide();
    // envoy.service.ratelimit.v3.RateLimitResponse.Code: 1 OK, 2 OVER_LIMIT.
    span?.setAttributes({ "tollgate.rls.overall_code": answer.overall_code === 2 ? "OVER_LIMIT" : "OK" });
    return answer;
  });
}
