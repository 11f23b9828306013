// Envoy's ext_authz over gRPC (envoy.service.auth.v3.Authorization/Check): the CheckRequest's
// method, path, headers and source peer become the check's facts; the Decision becomes a
// CheckResponse that states its own mutations (headers set and removed upstream, headers for the
// client, dynamic metadata), so Envoy's configuration needs no header allow-lists.
import type { CheckRequest } from "../../check/checker.js";
import type { Decision } from "../../check/types.js";
import { decisionLabels } from "../../metrics/check-observer.js";
import { type ClientIpOptions, clientAddress } from "../client-ip.js";
import type { CheckContext, Protocol } from "../front-end.js";
import { MAX_URI, uriTooLong } from "../http-check.js";
import { type CheckResponse, renderDecision } from "../render.js";
import { GrpcError, type GrpcMethod, GrpcStatus } from "./grpc-server.js";
import type { GrpcService } from "./listener.js";
import {
  type CheckRequestMessage,
  type CheckResponseMessage,
  type HeaderOption,
  type HttpRequestAttributes,
  messages,
  type StructValue,
} from "./protos.js";

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

/** A request header as Envoy sent it: in `headers`, or in `header_map` (encode_raw_headers). */
function requestHeader(http: HttpRequestAttributes, name: string): string | undefined {
  const merged = http.headers?.[name];
  if (merged !== undefined) return merged;
  const raw = http.header_map?.headers;
  if (raw === undefined) return undefined;
  let value: string | undefined;
  for (const entry of raw) {
    if (entry.key?.toLowerCase() !== name) continue;
    const text =
      entry.raw_value !== undefined && entry.raw_value.length > 0
        ? Buffer.from(entry.raw_value).toString("utf8")
        : (entry.value ?? "");
    // Repeated headers are not merged in header_map: merged here as Envoy merges `headers`.
    value = value === undefined ? text : `${value},${text}`;
  }
  return value;
}

/**
 * The check's facts from a decoded CheckRequest, or the answer to one no check can be made of
 * (414). Throws INVALID_ARGUMENT when the message is not an HTTP request's.
 */
export function checkFacts(
  message: CheckRequestMessage,
  peer: string | undefined,
  clientIp: ClientIpOptions,
): CheckRequest | CheckResponse {
  const attributes = message.attributes;
  const http = attributes?.request?.http;
  // protobufjs leaves an absent message field null (on the prototype), never undefined.
  if (http == null || !http.method || !http.path) {
    throw new GrpcError(
      GrpcStatus.INVALID_ARGUMENT,
      "the CheckRequest has no attributes.request.http with a method and a path",
    );
  }
  const path = http.path;
  if (path.length > MAX_URI) return uriTooLong();
  return {
    method: http.method,
    path: path.startsWith("/") ? path : `/${path}`,
    authorization: requestHeader(http, "authorization"),
    ip: clientAddress(
      {
        // The address of Envoy's downstream connection (its TCP peer, or what the PROXY protocol
        // stated): not X-Forwarded-For, which Envoy does not apply here (docs/istio.md).
        stated: attributes?.source?.address?.socket_address?.address,
        forwardedFor: requestHeader(http, "x-forwarded-for"),
        peer,
      },
      clientIp,
    ),
  };
}

/**
 * `append` stated as false on every header: Envoy up to 1.37 reads only that deprecated field for
 * upstream headers (envoyproxy/envoy#42857), and from the change that fixed it (#42878) an absent
 * `append` falls back to `append_action`, whose default adds a second value instead of replacing
 * the client's. Stated false, every Envoy overwrites (and a denial's headers are never dropped).
 */
function option(key: string, value: string): HeaderOption {
  return { header: { key, value }, append: { value: false } };
}

function metadata(decision: Decision | undefined, httpStatus: number): Record<string, StructValue> {
  const fields: Record<string, StructValue> = {};
  if (decision === undefined) {
    fields.decision = { stringValue: "deny" };
    fields.reason = { stringValue: httpStatus === 414 ? "uri_too_long" : "bad_request" };
    return fields;
  }
  const labels = decisionLabels(decision);
  const identity = decision.kind === "allow" || decision.status === 429 ? decision.identity : undefined;
  if (identity !== undefined) fields.user_id = { stringValue: identity.userId };
  fields.tier = { stringValue: labels.tier };
  fields.category = { stringValue: labels.category };
  fields.decision = { stringValue: labels.decision };
  fields.reason = { stringValue: labels.reason };
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

/** The HTTP check's answer (status, headers, body) as a CheckResponse. */
export function checkResponse(response: CheckResponse, decision: Decision | undefined): CheckResponseMessage {
  const dynamic_metadata = { fields: metadata(decision, response.status) };
  if (response.status === 200) {
    const headers: HeaderOption[] = [];
    const headers_to_remove: string[] = [];
    const response_headers_to_add: HeaderOption[] = [];
    for (const name of IDENTITY_HEADERS) {
      const value = response.headers[name];
      if (value === undefined || value === "") headers_to_remove.push(name);
      else headers.push(option(name, value));
    }
    for (const [name, value] of Object.entries(response.headers)) {
      if (!IDENTITY.has(name)) response_headers_to_add.push(option(name, value));
    }
    return {
      status: { code: GrpcStatus.OK },
      ok_response: { headers, headers_to_remove, response_headers_to_add },
      dynamic_metadata,
    };
  }
  return {
    status: { code: grpcStatusOf(response.status), message: statusText(response.status, decision) },
    denied_response: {
      status: { code: response.status },
      headers: Object.entries(response.headers).map(([name, value]) => option(name, value)),
      body: response.body,
    },
    dynamic_metadata,
  };
}

function encode(response: CheckResponseMessage): Uint8Array {
  return messages.CheckResponse.encode(response).finish();
}

/** Authorization/Check: every proxied request's check, as the HTTP front ends make it. */
export function authorizationCheck(context: CheckContext): GrpcMethod {
  const { checker, clientIp, logger, onDecision } = context;
  return {
    kind: "unary",
    async handle(request, call) {
      const started = process.hrtime.bigint();
      let message: CheckRequestMessage;
      try {
        message = messages.CheckRequest.decode(request) as CheckRequestMessage;
      } catch {
        throw new GrpcError(GrpcStatus.INVALID_ARGUMENT, "the CheckRequest cannot be decoded");
      }
      const facts = checkFacts(message, call.peer, clientIp);
      if ("status" in facts) return encode(checkResponse(facts, undefined));
      let decision: Decision;
      try {
        decision = await checker(facts);
      } catch (error) {
        // As the HTTP check listener answers it: a 503 for Envoy to send, never a failed call.
        logger.error({ err: error }, "check failed unexpectedly");
        decision = UNAVAILABLE;
      }
      const answer = encode(checkResponse(renderDecision(decision, Date.now()), decision));
      onDecision?.(protocol, decision, Number(process.hrtime.bigint() - started) / 1e9, facts.ip);
      return answer;
    },
  };
}

/** The Authorization service as the gRPC listener serves it. */
export function authorizationService(context: CheckContext): GrpcService {
  return { name: AUTHORIZATION_SERVICE, methods: [[AUTHORIZATION_CHECK, authorizationCheck(context)]] };
}
