// The W3C Trace Context headers of a request (HTTP/1.1, or a gRPC call's HTTP/2 metadata), as a
// span continues them. Read only when tracing is on.
import type { IncomingHttpHeaders } from "node:http";
import type { TraceHeaders } from "../tracing/tracing.js";

const single = (value: string | string[] | undefined): string | undefined =>
  Array.isArray(value) ? value[0] : value === "" ? undefined : value;

export function traceHeadersOf(headers: IncomingHttpHeaders | undefined): TraceHeaders {
  return { traceparent: single(headers?.traceparent), tracestate: single(headers?.tracestate) };
}
