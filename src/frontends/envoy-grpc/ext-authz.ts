// Envoy's ext_authz over gRPC (envoy.service.auth.v3.Authorization/Check): the CheckRequest's
// method, path, headers and source peer become the check's facts; the Decision becomes a
// CheckResponse that states its own mutations (headers set and removed upstream, headers for the
// client, dynamic metadata), so Envoy's configuration needs no header allow-lists.
import type { CheckRequest } from "../../check/checker.js";
import type { Decision } from "../../check/types.js";
import { decisionLabels } from "../../metrics/check-observer.js";
import { requestIdOf } from "../../process/request-id.js";
import { tracedCheck } from "../../tracing/check-span.js";
import type { TraceHeaders } from "../../tracing/tracing.js";
import type { RemovedHeaders } from "../api-key-headers.js";
import { type ClientIpOptions, clientAddress } from "../client-ip.js";
import type { CheckContext, Protocol } from "../front-end.js";
import { MAX_URI, uriTooLong } from "../http-check.js";
import { type CheckResponse, renderDecision } from "../render.js";
import { traceHeadersOf } from "../trace-headers.js";
import { type CheckRequestFields, readCheckRequest } from "./check-request.js";
import { type CheckAnswer, writeCheckResponse } from "./check-response.js";
import { type CallInfo, GrpcError, type GrpcMethod, GrpcStatus } from "./grpc-protocol.js";
import type { GrpcService } from "./listener.js";

export const AUTHORIZATION_SERVICE = "envoy.service.auth.v3.Authorization";
export const AUTHORIZATION_CHECK = `/${AUTHORIZATION_SERVICE}/Check`;

export const protocol: Protocol = "envoy-grpc";

const UNAVAILABLE: Decision = { kind: "deny", status: 503 };

/** The headers tollgate sets upstream on an allow; those it does not set are removed. */
const IDENTITY_HEADERS = ["x-user-id", "x-user-tier", "x-session-id"] as const;
const IDENTITY = new Set<string>(IDENTITY_HEADERS);

/** The gRPC status of a CheckResponse that denies with this HTTP status. */
function grpcStatusOf(httpStatus: number): number {
  switch (httpStatus) {
    case 401:
      return GrpcStatus.UNAUTHENTICATED;
    case 429:
      return GrpcStatus.RESOURCE_EXHAUSTED;
    case 503:
      return GrpcStatus.UNAVAILABLE;
    default:
      // 400 (an ambiguous target), 414 (too long).
      return GrpcStatus.INVALID_ARGUMENT;
  }
}

/**
 * The check's facts from a CheckRequest's fields, or the answer to one no check can be made of
 * (414). Throws INVALID_ARGUMENT when the message is not an HTTP request's.
 */
export function checkFacts(
  fields: CheckRequestFields,
  peer: string | undefined,
  clientIp: ClientIpOptions,
): CheckRequest | CheckResponse {
  const { method, path } = fields;
  if (method === "" || path === "") {
    throw new GrpcError(
      GrpcStatus.INVALID_ARGUMENT,
      "the CheckRequest has no attributes.request.http with a method and a path",
    );
  }
  if (path.length > MAX_URI) return uriTooLong();
  return {
    method,
    // As sent: a path that is not origin-form (`http://host/api/search`, `*`) is refused by the
    // check, where a "/" put in front would make it a general route that an upstream reading the
    // absolute form (Node, express) serves as /api/search.
    path,
    authorization: fields.authorization,
    apiKey: fields.apiKey,
    requestId: requestIdOf(fields.requestId),
    ip: clientAddress(
      {
        // The address of Envoy's downstream connection (its TCP peer, or what the PROXY protocol
        // stated): not X-Forwarded-For, which Envoy does not apply here (docs/istio.md).
        stated: fields.source,
        forwardedFor: fields.forwardedFor,
        peer,
      },
      clientIp,
    ),
  };
}

/** dynamic_metadata's fields, name and value flattened: for Envoy's access logs. */
function metadata(decision: Decision | undefined, httpStatus: number): string[] {
  if (decision === undefined) {
    return ["decision", "deny", "reason", httpStatus === 414 ? "uri_too_long" : "bad_request"];
  }
  const labels = decisionLabels(decision);
  const identity = decision.kind === "allow" || decision.status === 429 ? decision.identity : undefined;
  const fields = identity === undefined ? [] : ["user_id", identity.userId];
  fields.push(
    "tier",
    labels.tier,
    "category",
    labels.category,
    "decision",
    labels.decision,
    "reason",
    labels.reason,
  );
  return fields;
}

/** What the CheckResponse's status says of a denial, for Envoy's logs: never a secret. */
function statusText(status: number, decision: Decision | undefined): string {
  if (decision?.kind === "deny" && (decision.status === 401 || decision.status === 400)) {
    return decision.description;
  }
  switch (status) {
    case 429:
      return "rate limit exceeded";
    case 503:
      return "the rate-limit store is unavailable";
    case 414:
      return `the request target is longer than ${MAX_URI} bytes`;
    default:
      return "denied";
  }
}

/**
 * The HTTP check's answer (status, headers, body) as a CheckResponse's content. Every header option
 * states `append` false: Envoy up to 1.37 reads only that deprecated field for upstream headers
 * (envoyproxy/envoy#42857), and from the change that fixed it (#42878) an absent `append` falls back
 * to `append_action`, whose default adds a second value instead of replacing the client's. Stated
 * false, every Envoy overwrites (and a denial's headers are never dropped).
 */
export function checkAnswer(
  response: CheckResponse,
  decision: Decision | undefined,
  removed?: RemovedHeaders,
): CheckAnswer {
  const meta = metadata(decision, response.status);
  if (response.status === 200) {
    const headers: string[] = [];
    const remove: string[] = [];
    const clientHeaders: string[] = [];
    for (const name of IDENTITY_HEADERS) {
      const value = response.headers[name];
      if (value === undefined || value === "") remove.push(name);
      else headers.push(name, value);
    }
    if (removed !== undefined) remove.push(...removed.names);
    for (const name in response.headers) {
      if (!IDENTITY.has(name)) clientHeaders.push(name, response.headers[name] as string);
    }
    return {
      code: GrpcStatus.OK,
      message: "",
      httpStatus: 200,
      headers,
      remove,
      clientHeaders,
      body: "",
      metadata: meta,
    };
  }
  const headers: string[] = [];
  for (const name in response.headers) headers.push(name, response.headers[name] as string);
  return {
    code: grpcStatusOf(response.status),
    message: statusText(response.status, decision),
    httpStatus: response.status,
    headers,
    remove: [],
    clientHeaders: [],
    body: response.body,
    metadata: meta,
  };
}

/**
 * The trace a Check continues: the ext_authz call's own (Envoy's tracer puts its span in the call's
 * metadata), else the proxied request's.
 */
function callerTrace(fields: CheckRequestFields, call: CallInfo): TraceHeaders {
  const own = traceHeadersOf(call.headers);
  return own.traceparent !== undefined
    ? own
    : { traceparent: fields.traceparent, tracestate: fields.tracestate };
}

/** Authorization/Check: every proxied request's check, as the HTTP front ends make it. */
export function authorizationCheck(context: CheckContext): GrpcMethod {
  const { checker, clientIp, logger, onDecision, apiKeyHeader, apiKeyHeaders, tracing } = context;
  return {
    kind: "unary",
    async handle(request, call) {
      const started = process.hrtime.bigint();
      const fields = readCheckRequest(request, apiKeyHeader);
      const facts = checkFacts(fields, call.peer, clientIp);
      if ("status" in facts) return writeCheckResponse(checkAnswer(facts, undefined));
      facts.caller = call;
      let decision: Decision;
      try {
        decision =
          tracing === undefined
            ? await checker(facts)
            : await tracedCheck(
                tracing,
                {
                  protocol,
                  caller: callerTrace(fields, call),
                  requestId: facts.requestId,
                  method: facts.method,
                },
                () => checker(facts),
              );
      } catch (error) {
        // As the HTTP check listener answers it: a 503 for Envoy to send, never a failed call.
        logger.error({ err: error, requestId: facts.requestId }, "check failed unexpectedly");
        decision = UNAVAILABLE;
      }
      const removed = decision.kind === "allow" ? apiKeyHeaders?.(facts) : undefined;
      const answer = writeCheckResponse(checkAnswer(renderDecision(decision, Date.now()), decision, removed));
      const seconds = Number(process.hrtime.bigint() - started) / 1e9;
      onDecision?.(protocol, decision, seconds, facts.ip, facts.requestId);
      return answer;
    },
  };
}

/** The Authorization service as the gRPC listener serves it. */
export function authorizationService(context: CheckContext): GrpcService {
  return { name: AUTHORIZATION_SERVICE, methods: [[AUTHORIZATION_CHECK, authorizationCheck(context)]] };
}
