// The Check call's two messages read and written by hand, field by field, on the wire format: every
// proxied request waits on them. protobufjs builds an object for each of the ~15 headers Envoy sends
// and for every nested message, to read four strings; and writes a CheckResponse from objects it
// has to walk twice. Here the reader walks the bytes once and decodes only the fields the check
// uses, and the writer measures and writes each field once. The field numbers are those of the
// .proto files in proto/ (Envoy's), which stay the schema: the tests hold this codec to protobufjs
// reading and writing the same messages (test/unit/envoy-grpc.test.ts). docs/performance.md has
// the figures that asked for it.
import { Framed, GrpcError, GrpcStatus, prefixed } from "./grpc-protocol.js";
import { BYTES, fieldSize, Malformed, Reader, tag, text, VARINT, varintSize, Writer } from "./wire.js";

/** What the check reads of a CheckRequest. */
export type CheckRequestFields = {
  method: string;
  path: string;
  authorization: string | undefined;
  forwardedFor: string | undefined;
  /** attributes.source.address.socket_address.address */
  source: string | undefined;
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
export function readCheckRequest(bytes: Uint8Array): CheckRequestFields {
  try {
    return readFields(bytes);
  } catch (error) {
    if (error instanceof Malformed) {
      throw new GrpcError(GrpcStatus.INVALID_ARGUMENT, "the CheckRequest cannot be decoded");
    }
    throw error;
  }
}

function readFields(bytes: Uint8Array): CheckRequestFields {
  const buf = Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const out: CheckRequestFields = {
    method: "",
    path: "",
    authorization: undefined,
    forwardedFor: undefined,
    source: undefined,
  };
  const top = new Reader(buf, 0, buf.length);
  while (top.at < top.end) {
    const key = top.varint();
    // CheckRequest.attributes = 1
    if (key === (1 << 3) + BYTES) {
      const start = top.span();
      readAttributes(new Reader(buf, start, top.at), out);
    } else {
      top.skip(key & 7);
    }
  }
  return out;
}

function readAttributes(r: Reader, out: CheckRequestFields): void {
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
      if (http !== undefined) readHttp(new Reader(r.buf, http[0], http[1]), out);
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

/** Appends a header's value as Envoy merges repeated ones. */
const merged = (known: string | undefined, value: string): string =>
  known === undefined ? value : `${known},${value}`;

/** Raw headers (header_map), kept apart: the map's value wins when a request carries both. */
type RawHeaders = { authorization: string | undefined; forwardedFor: string | undefined };

function readHttp(r: Reader, out: CheckRequestFields): void {
  const { buf } = r;
  const raw: RawHeaders = { authorization: undefined, forwardedFor: undefined };
  while (r.at < r.end) {
    const key = r.varint();
    switch (key) {
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
        readHeader(buf, s, r.at, out, undefined);
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
            readHeader(buf, hs, m.at, out, raw);
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
  out.forwardedFor ??= raw.forwardedFor;
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
): void {
  const r = new Reader(buf, start, end);
  let keyStart = -1;
  let keyEnd = -1;
  let value: string | undefined;
  let rawValue: string | undefined;
  while (r.at < r.end) {
    const k = r.varint();
    if (k === (1 << 3) + BYTES) {
      keyStart = r.span();
      keyEnd = r.at;
    } else if (k === (2 << 3) + BYTES) {
      const s = r.span();
      value = text(buf, s, r.at);
    } else if (raw !== undefined && k === (3 << 3) + BYTES) {
      const s = r.span();
      rawValue = text(buf, s, r.at);
    } else {
      r.skip(k & 7);
    }
  }
  if (keyStart < 0) return;
  const v = rawValue !== undefined && rawValue !== "" ? rawValue : (value ?? "");
  if (sameName(buf, keyStart, keyEnd, "authorization")) {
    if (raw === undefined) out.authorization = v;
    else raw.authorization = merged(raw.authorization, v);
  } else if (sameName(buf, keyStart, keyEnd, "x-forwarded-for")) {
    if (raw === undefined) out.forwardedFor = v;
    else raw.forwardedFor = merged(raw.forwardedFor, v);
  }
}

// --- the writer ---

/** A CheckResponse's content, as the writer takes it. */
export type CheckAnswer = {
  /** google.rpc.Code; 0 allows. */
  code: number;
  message: string;
  /** HTTP status of a denied_response (ignored on allow). */
  httpStatus: number;
  /** ok_response.headers, or denied_response.headers: name, value pairs, flattened. */
  headers: readonly string[];
  /** ok_response.headers_to_remove. */
  remove: readonly string[];
  /** ok_response.response_headers_to_add: name, value pairs, flattened. */
  clientHeaders: readonly string[];
  body: string;
  /** dynamic_metadata: name, value pairs, flattened (string values). */
  metadata: readonly string[];
};

/** HeaderValue {key = 1, value = 2}: its content's size. */
function headerValueSize(key: number, value: number): number {
  return fieldSize(key) + fieldSize(value);
}

/**
 * HeaderValueOption {header = 1, append = 2 (BoolValue, stated false: present and empty)}: its
 * content's size.
 */
function optionSize(key: number, value: number): number {
  return fieldSize(headerValueSize(key, value)) + 2;
}

/** The UTF-8 byte lengths of a flat list of strings. */
function lengths(list: readonly string[]): number[] {
  const out = new Array<number>(list.length);
  for (let i = 0; i < list.length; i += 1) out[i] = Buffer.byteLength(list[i] as string, "utf8");
  return out;
}

function optionsSize(pairs: readonly string[], sizes: readonly number[]): number {
  let total = 0;
  for (let i = 0; i < pairs.length; i += 2) {
    total += fieldSize(optionSize(sizes[i] as number, sizes[i + 1] as number));
  }
  return total;
}

function writeOptions(w: Writer, field: number, pairs: readonly string[], sizes: readonly number[]): void {
  for (let i = 0; i < pairs.length; i += 2) {
    const k = sizes[i] as number;
    const v = sizes[i + 1] as number;
    w.open(tag(field, BYTES), optionSize(k, v));
    w.open(tag(1, BYTES), headerValueSize(k, v));
    w.string(tag(1, BYTES), pairs[i] as string, k);
    w.string(tag(2, BYTES), pairs[i + 1] as string, v);
    // append = 2: a BoolValue present with its default, false.
    w.byte(tag(2, BYTES));
    w.byte(0);
  }
}

/** Struct.fields = 1 entries {key = 1, value = 2: Value {string_value = 3}}: each entry's content size. */
function metadataEntrySize(key: number, value: number): number {
  return fieldSize(key) + fieldSize(fieldSize(value));
}

/**
 * The CheckResponse's bytes (status = 1, denied_response = 2 or ok_response = 3, dynamic_metadata =
 * 4), after gRPC's 5-byte prefix: sent as they are.
 */
export function writeCheckResponse(answer: CheckAnswer): Framed {
  const messageLength = Buffer.byteLength(answer.message, "utf8");
  const statusSize =
    (answer.code === 0 ? 0 : 1 + varintSize(answer.code)) +
    (messageLength === 0 ? 0 : fieldSize(messageLength));
  const headerSizes = lengths(answer.headers);
  const metaSizes = lengths(answer.metadata);
  let metaSize = 0;
  for (let i = 0; i < answer.metadata.length; i += 2) {
    metaSize += fieldSize(metadataEntrySize(metaSizes[i] as number, metaSizes[i + 1] as number));
  }
  let httpSize: number;
  let removeSizes: number[] = [];
  let clientSizes: number[] = [];
  let bodyLength = 0;
  if (answer.code === 0) {
    removeSizes = lengths(answer.remove);
    clientSizes = lengths(answer.clientHeaders);
    httpSize = optionsSize(answer.headers, headerSizes) + optionsSize(answer.clientHeaders, clientSizes);
    for (const size of removeSizes) httpSize += fieldSize(size);
  } else {
    bodyLength = Buffer.byteLength(answer.body, "utf8");
    const status = 1 + varintSize(answer.httpStatus);
    httpSize =
      fieldSize(status) +
      optionsSize(answer.headers, headerSizes) +
      (bodyLength === 0 ? 0 : fieldSize(bodyLength));
  }
  const total = fieldSize(statusSize) + fieldSize(httpSize) + (metaSize === 0 ? 0 : fieldSize(metaSize));
  const w = new Writer(prefixed(total));
  w.at = 5;
  w.open(tag(1, BYTES), statusSize);
  if (answer.code !== 0) {
    w.byte(tag(1, VARINT));
    w.varint(answer.code);
  }
  if (messageLength > 0) w.string(tag(2, BYTES), answer.message, messageLength);
  if (answer.code === 0) {
    w.open(tag(3, BYTES), httpSize);
    writeOptions(w, 2, answer.headers, headerSizes);
    for (let i = 0; i < answer.remove.length; i += 1) {
      w.string(tag(5, BYTES), answer.remove[i] as string, removeSizes[i] as number);
    }
    writeOptions(w, 6, answer.clientHeaders, clientSizes);
  } else {
    w.open(tag(2, BYTES), httpSize);
    w.open(tag(1, BYTES), 1 + varintSize(answer.httpStatus));
    w.byte(tag(1, VARINT));
    w.varint(answer.httpStatus);
    writeOptions(w, 2, answer.headers, headerSizes);
    if (bodyLength > 0) w.string(tag(3, BYTES), answer.body, bodyLength);
  }
  if (metaSize > 0) {
    w.open(tag(4, BYTES), metaSize);
    for (let i = 0; i < answer.metadata.length; i += 2) {
      const k = metaSizes[i] as number;
      const v = metaSizes[i + 1] as number;
      w.open(tag(1, BYTES), metadataEntrySize(k, v));
      w.string(tag(1, BYTES), answer.metadata[i] as string, k);
      w.open(tag(2, BYTES), fieldSize(v));
      w.string(tag(3, BYTES), answer.metadata[i + 1] as string, v);
    }
  }
  if (w.at !== 5 + total) throw new Error(`CheckResponse written ${w.at - 5} of ${total} bytes`);
  return new Framed(w.buf);
}
