// What every check front end shares: its protocol label and what the composition root hands it.
// A front end turns its protocol's request into the check's facts and the Decision into its answer.
import type { Checker } from "../check/checker.js";
import type { Decision } from "../check/types.js";
import type { Logger } from "../process/logger.js";
import type { Readiness } from "../process/readiness.js";
import type { Tracing } from "../tracing/tracing.js";
import type { ApiKeyHeaders } from "./api-key-headers.js";
import type { ClientIpOptions } from "./client-ip.js";

/**
 * The label metrics and logs give a front end's checks: "envoy", "nginx", "envoy-grpc".
 * A plain string, so that a new front end declares its own without editing a shared list; always a
 * constant of the front end, never request data, so that the metric label stays bounded.
 */
export type Protocol = string;

/** What every check front end gets from the composition root. */
export type CheckContext = {
  checker: Checker;
  clientIp: ClientIpOptions;
  /** API_KEY_HEADER, lower case: the request header that carries an API key. */
  apiKeyHeader: string;
  /**
   * The headers that carried an API key, which an allow asks the proxy to remove before the
   * upstream; undefined with API_KEY_FORWARD=true (the key is forwarded).
   */
  apiKeyHeaders?: ApiKeyHeaders | undefined;
  logger: Logger;
  /** Called once per answered check, for metrics and logs; `requestId`: the proxy's x-request-id. */
  onDecision?(
    protocol: Protocol,
    decision: Decision,
    seconds: number,
    ip: string,
    requestId: string | undefined,
  ): void;
  /** Start-up and stop phases, for protocols that report health themselves (gRPC); ready when omitted. */
  readiness?: Readiness | undefined;
  /** Calls by method and status, for protocols with methods (gRPC). */
  rpc?: RpcObserver | undefined;
  /** Spans of checks (OTEL_EXPORTER_OTLP_ENDPOINT); undefined when tracing is off. */
  tracing?: Tracing | undefined;
};

/** Counts calls per method: method names are the server's own, never the request's. */
export type RpcObserver = {
  started(method: string): void;
  /** `status`: the gRPC status name (OK, INVALID_ARGUMENT…), CANCELLED, or NOT_GRPC. */
  finished(method: string, status: string): void;
};
