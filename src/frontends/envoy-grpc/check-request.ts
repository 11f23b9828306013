// The Check call's request, a CheckRequest, read by hand on the wire format (its answer:
// check-response.ts): every proxied request waits on it. protobufjs builds an object for each of
// the ~15 headers Envoy sends and for every nested message, to read four strings; this walks the
// bytes once and decodes only the fields the check uses. The field numbers are those of the .proto
// files in proto/ (Envoy's), which stay the schema: the tests hold this reader and the writer to
// protobufjs reading and writing the same messages (test/unit/envoy-grpc.test.ts).
// docs/performance.md has the figures that asked for it.
import { GrpcError, GrpcStatus } from "./grpc-protocol.js";
import { BYTES, Malformed, Reader, text } from "./wire.js";

/** What the check reads of a CheckRequest. */
export type CheckRequestFields = {
  method: string;
  path: string;
  authorization: string | undefined;
  /** The API key header's value (API_KEY_HEADER). */
  apiKey: string | undefined;
  forwardedFor: string | undefined;
  /** attributes.source.address.socket_address.address */
  source: string | undefined;
  /**
   * The proxied request's x-request-id (the id Envoy's access log and the upstream see); without
   * that header, attributes.request.http.id, which Envoy fills with its stream id, not x-request-id.
   */
  requestId: string | undefined;
  /** W3C Trace Context headers of the proxied request (for a span when tracing is on). */
  traceparent: string | undefined;
  tracestate: string | undefined;
};

/** Whether bytes [start, end) spell `name` (lower-case ASCII), ASCII letters compared without case. */
function sameName(buf: Buffer, start: number, end: number, name: string): boolean {
  if (end - start !== name.length) return false;
  for (let i = 0; i < name.length; i += 1) {
    let c = buf[start + i] as number;
    if (c >= 65 && c <= 90) c += 32;
    if (c !== name.charCodeAt(i)) return false;
  }
  return true;
}

/** The fields a Check needs, from a CheckRequest's bytes; INVALID_ARGUMENT when they do not decode. */
export function readCheckRequest(bytes: Uint8Array, apiKeyHeader = "x-api-key"): CheckRequestFields {
  try {
    return readFields(bytes, apiKeyHeader);
  } catch (error) {
    if (error instanceof Malformed) {
      throw new GrpcError(GrpcStatus.INVALID_ARGUMENT, "the CheckRequest cannot be decoded");
    }
    throw error;
  }
}

function readFields(bytes: Uint8Array, apiKeyHeader: string): CheckRequestFields {
  const buf = Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const out: CheckRequestFields = {
    method: "",
    path: "",
    authorization: undefined,
    apiKey: undefined,
    forwardedFor: undefined,
    source: undefined,
    requestId: undefined,
    traceparent: undefined,
    tracestate: undefined,
  };
  const top = new Reader(buf, 0, buf.length);
  while (top.at < top.end) {
    const key = top.varint();
    // CheckRequest.attributes = 1
    if (key === (1 << 3) + BYTES) {
      const start = top.span();
      readAttributes(new Reader(buf, start, top.at), out, apiKeyHeader);
    } else {
      top.skip(key & 7);
    }
  }
  return out;
}

function readAttributes(r: Reader, out: CheckRequestFields, apiKeyHeader: string): void {
  while (r.at < r.end) {
    const key = r.varint();
    if (key === (1 << 3) + BYTES) {
      // AttributeContext.source = 1 → Peer.address = 1 → Address.socket_address = 1 → address = 2
      const start = r.span();
      const address = nested(r.buf, start, r.at, 1);
      const socket = address === undefined ? undefined : nested(r.buf, address[0], address[1], 1);
      const ip = socket === undefined ? undefined : nested(r.buf, socket[0], socket[1], 2);
      if (ip !== undefined) out.source = text(r.buf, ip[0], ip[1]);
    } else if (key === (4 << 3) + BYTES) {
      // AttributeContext.request = 4 → Request.http = 2
      const start = r.span();
      const http = nested(r.buf, start, r.at, 2);
      if (http !== undefined) readHttp(new Reader(r.buf, http[0], http[1]), out, apiKeyHeader);
    } else {
      r.skip(key & 7);
    }
  }
}

/** The extent of the last occurrence of bytes field `field` in the message [start, end). */
function nested(buf: Buffer, start: number, end: number, field: number): [number, number] | undefined {
  const r = new Reader(buf, start, end);
  let found: [number, number] | undefined;
  while (r.at < r.end) {
    const key = r.varint();
    if (key === (field << 3) + BYTES) {
      const s = r.span();
      found = [s, r.at];
    } else {
      r.skip(key & 7);
    }
  }
  return found;
}

/** The headers the check reads. */
const AUTHORIZATION = 1;
const API_KEY = 2;
const FORWARDED_FOR = 3;
const REQUEST_ID = 4;
const TRACEPARENT = 5;
const TRACESTATE = 6;

/** Appends a header's value as Envoy merges repeated ones. */
const merged = (known: string | undefined, value: string): string =>
  known === undefined ? value : `${known},${value}`;

/** Raw headers (header_map), kept apart: the map's value wins when a request carries both. */
type RawHeaders = {
  authorization: string | undefined;
  apiKey: string | undefined;
  forwardedFor: string | undefined;
  requestId: string | undefined;
  traceparent: string | undefined;
  tracestate: string | undefined;
};

function readHttp(r: Reader, out: CheckRequestFields, apiKeyHeader: string): void {
  const { buf } = r;
  const raw: RawHeaders = {
    authorization: undefined,
    apiKey: undefined,
    forwardedFor: undefined,
    requestId: undefined,
    traceparent: undefined,
    tracestate: undefined,
  };
  let streamId: string | undefined;
  while (r.at < r.end) {
    const key = r.varint();
    switch (key) {
      case (1 << 3) + BYTES: {
        // HttpRequest.id = 1: Envoy's stream id (a decimal number, check_request_utils.cc), which
        // appears in no header: only a CheckRequest without x-request-id (allowed_headers) uses it.
        const s = r.span();
        if (r.at > s) streamId = text(buf, s, r.at);
        break;
      }
      case (2 << 3) + BYTES: {
        // HttpRequest.method = 2
        const s = r.span();
        out.method = text(buf, s, r.at);
        break;
      }
      case (4 << 3) + BYTES: {
        // HttpRequest.path = 4
        const s = r.span();
        out.path = text(buf, s, r.at);
        break;
      }
      case (3 << 3) + BYTES: {
        // HttpRequest.headers = 3: map<string, string> entries {key = 1, value = 2}
        const s = r.span();
        readHeader(buf, s, r.at, out, undefined, apiKeyHeader);
        break;
      }
      case (13 << 3) + BYTES: {
        // HttpRequest.header_map = 13: HeaderMap.headers = 1, HeaderValue {key = 1, value = 2, raw_value = 3}
        const s = r.span();
        const m = new Reader(buf, s, r.at);
        while (m.at < m.end) {
          const k = m.varint();
          if (k === (1 << 3) + BYTES) {
            const hs = m.span();
            readHeader(buf, hs, m.at, out, raw, apiKeyHeader);
          } else {
            m.skip(k & 7);
          }
        }
        break;
      }
      default:
        r.skip(key & 7);
    }
  }
  out.authorization ??= raw.authorization;
  out.apiKey ??= raw.apiKey;
  out.forwardedFor ??= raw.forwardedFor;
  out.traceparent ??= raw.traceparent;
  out.tracestate ??= raw.tracestate;
  out.requestId ??= raw.requestId ?? streamId;
}

/**
 * One header (a map entry, or a raw HeaderValue, whose repeats are merged here as Envoy merges the
 * map's): kept when it is one the check reads. A map's keys are lower-case; raw keys are compared
 * without case.
 */
function readHeader(
  buf: Buffer,
  start: number,
  end: number,
  out: CheckRequestFields,
  raw: RawHeaders | undefined,
  apiKeyHeader: string,
): void {
  const r = new Reader(buf, start, end);
  let keyStart = -1;
  let keyEnd = -1;
  // Values are spans until the key says the header is one the check reads: most are not, and
  // decoding each one's text would be the reader's largest cost.
  let valueStart = -1;
  let valueEnd = -1;
  let rawStart = -1;
  let rawEnd = -1;
  while (r.at < r.end) {
    const k = r.varint();
    if (k === (1 << 3) + BYTES) {
      keyStart = r.span();
      keyEnd = r.at;
    } else if (k === (2 << 3) + BYTES) {
      valueStart = r.span();
      valueEnd = r.at;
    } else if (raw !== undefined && k === (3 << 3) + BYTES) {
      rawStart = r.span();
      rawEnd = r.at;
    } else {
      r.skip(k & 7);
    }
  }
  if (keyStart < 0) return;
  const header = headerOf(buf, keyStart, keyEnd, apiKeyHeader);
  if (header === undefined) return;
  const v =
    rawEnd > rawStart ? text(buf, rawStart, rawEnd) : valueStart < 0 ? "" : text(buf, valueStart, valueEnd);
  switch (header) {
    case AUTHORIZATION:
      if (raw === undefined) out.authorization = v;
      else raw.authorization = merged(raw.authorization, v);
      break;
    case API_KEY:
      if (raw === undefined) out.apiKey = v;
      else raw.apiKey = merged(raw.apiKey, v);
      break;
    case FORWARDED_FOR:
      if (raw === undefined) out.forwardedFor = v;
      else raw.forwardedFor = merged(raw.forwardedFor, v);
      break;
    case REQUEST_ID:
      // One id: of raw repeats, the first.
      (raw ?? out).requestId ??= v;
      break;
    case TRACEPARENT:
      (raw ?? out).traceparent = v;
      break;
    default:
      (raw ?? out).tracestate = v;
  }
}

/** Which of the headers the check reads bytes [start, end) name, if any. */
function headerOf(buf: Buffer, start: number, end: number, apiKeyHeader: string): number | undefined {
  if (sameName(buf, start, end, "authorization")) return AUTHORIZATION;
  if (sameName(buf, start, end, apiKeyHeader)) return API_KEY;
  if (sameName(buf, start, end, "x-forwarded-for")) return FORWARDED_FOR;
  if (sameName(buf, start, end, "x-request-id")) return REQUEST_ID;
  if (sameName(buf, start, end, "traceparent")) return TRACEPARENT;
  if (sameName(buf, start, end, "tracestate")) return TRACESTATE;
  return undefined;
}
