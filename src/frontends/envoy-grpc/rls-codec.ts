// ShouldRateLimit's two messages read and written on the wire format, as check-request.ts and check-response.ts do for the
// Check call: a rate limit call is on every proxied request's path too. Field numbers are those of
// proto/envoy/service/ratelimit/v3/rls.proto and proto/envoy/extensions/common/ratelimit/v3/
// ratelimit.proto (Envoy's); the tests hold this codec to protobufjs reading and writing them.
import { isUtf8 } from "node:buffer";
import { Framed, GrpcError, GrpcStatus, prefixed } from "./grpc-protocol.js";
import {
  BYTES,
  fieldSize,
  Malformed,
  Reader,
  tag,
  text,
  utf8Length,
  VARINT,
  varintSize,
  Writer,
} from "./wire.js";

/** A RateLimitRequest's descriptor as the rate limit service reads it (the shape protobufjs decodes too). */
export type DecodedDescriptor = {
  entries?: { key?: string; value?: string }[];
  limit?: { requests_per_unit?: number; unit?: number } | null;
  hits_addend?: { value?: number | { toNumber(): number } } | null;
  is_negative_hits?: boolean;
};
export type DecodedRequest = { domain?: string; descriptors?: DecodedDescriptor[]; hits_addend?: number };

export type Duration = { seconds: number; nanos: number };
export type DescriptorStatus = {
  code: number;
  current_limit?: { name?: string; requests_per_unit: number; unit: number };
  limit_remaining: number;
  duration_until_reset?: Duration;
};

/** The RateLimitResponse (protobufjs's shape too, snake_case fields) of one request. */
export type RlsAnswer = {
  overall_code: number;
  statuses: DescriptorStatus[];
  response_headers_to_add?: { key: string; value: string }[];
};

/**
 * A request's size bounds: Envoy's route actions make a handful of descriptors of a few entries.
 * Checked as the message is read: a 4 MiB message of empty descriptors is 2 million objects
 * (measured: 0.3 s of the event loop and 240 MB of heap) before any check after the decode.
 */
export const MAX_DESCRIPTORS = 64;
export const MAX_ENTRIES = 32;

/** A RateLimitRequest as the rate limit service reads it. */
export function readRateLimitRequest(bytes: Uint8Array): DecodedRequest {
  const buf = Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  try {
    const out: DecodedRequest = { domain: "", descriptors: [], hits_addend: 0 };
    const r = new Reader(buf, 0, buf.length);
    while (r.at < r.end) {
      const key = r.varint();
      if (key === tag(1, BYTES)) {
        const s = r.span();
        out.domain = text(buf, s, r.at);
      } else if (key === tag(2, BYTES)) {
        const s = r.span();
        const descriptors = out.descriptors as DecodedDescriptor[];
        if (descriptors.length === MAX_DESCRIPTORS) {
          throw new GrpcError(
            GrpcStatus.INVALID_ARGUMENT,
            `at most ${MAX_DESCRIPTORS} descriptors per request`,
          );
        }
        descriptors.push(readDescriptor(buf, s, r.at));
      } else if (key === tag(3, VARINT)) {
        // uint32: the low 32 bits of the varint, as protobuf reads it.
        out.hits_addend = r.varint() % 2 ** 32;
      } else {
        r.skip(key & 7);
      }
    }
    return out;
  } catch (error) {
    if (error instanceof Malformed) {
      throw new GrpcError(GrpcStatus.INVALID_ARGUMENT, "the RateLimitRequest cannot be decoded");
    }
    throw error;
  }
}

/**
 * An entry's key or value as its bytes say it, even when they are not UTF-8 (Envoy copies header
 * bytes into a descriptor as they came, any byte from 0x80 up included): each byte that is no part
 * of a whole UTF-8 character becomes the lone surrogate U+DC00 + byte, which no UTF-8 text decodes
 * to; as U+FFFD, two different values would count as one. The reference (grpc-go) fails such a
 * call INTERNAL, which Envoy lets through uncounted by default. Linear: a value may be 4 MiB.
 */
function exactText(buf: Buffer, start: number, end: number): string {
  const decoded = text(buf, start, end);
  if (!decoded.includes("\uFFFD") || isUtf8(buf.subarray(start, end))) return decoded;
  const units = new Uint16Array(end - start);
  let n = 0;
  let at = start;
  while (at < end) {
    const length = charLength(buf, at, end);
    if (length === 0) {
      units[n++] = 0xdc00 + (buf[at] as number);
      at += 1;
      continue;
    }
    const first = buf[at] as number;
    let point = length === 1 ? first : first & (0xff >> (length + 1));
    for (let i = 1; i < length; i += 1) point = (point << 6) | ((buf[at + i] as number) & 0x3f);
    if (point > 0xffff) {
      units[n++] = 0xd800 + ((point - 0x10000) >> 10);
      units[n++] = 0xdc00 + ((point - 0x10000) & 0x3ff);
    } else {
      units[n++] = point;
    }
    at += length;
  }
  return Buffer.from(units.buffer, 0, n * 2).toString("utf16le");
}

/** The bytes of the whole UTF-8 character at `at` (RFC 3629: no overlong form, no surrogate), or 0. */
function charLength(buf: Buffer, at: number, end: number): number {
  const first = buf[at] as number;
  if (first < 0x80) return 1;
  const size = first < 0xc2 ? 0 : first < 0xe0 ? 2 : first < 0xf0 ? 3 : first < 0xf5 ? 4 : 0;
  if (size === 0 || at + size > end) return 0;
  // E0, ED, F0 and F4 narrow the second byte: no overlong form, surrogate, or past U+10FFFF.
  const second = buf[at + 1] as number;
  const low = first === 0xe0 ? 0xa0 : first === 0xf0 ? 0x90 : 0x80;
  const high = first === 0xed ? 0x9f : first === 0xf4 ? 0x8f : 0xbf;
  if (second < low || second > high) return 0;
  for (let i = 2; i < size; i += 1) {
    const byte = buf[at + i] as number;
    if (byte < 0x80 || byte > 0xbf) return 0;
  }
  return size;
}

/** RateLimitDescriptor: entries = 1 {key = 1, value = 2}, limit = 2, hits_addend = 3, is_negative_hits = 4. */
function readDescriptor(buf: Buffer, start: number, end: number): DecodedDescriptor {
  const d: DecodedDescriptor = { entries: [], limit: null, hits_addend: null, is_negative_hits: false };
  const r = new Reader(buf, start, end);
  while (r.at < r.end) {
    const key = r.varint();
    if (key === tag(1, BYTES)) {
      const s = r.span();
      const e = new Reader(buf, s, r.at);
      let k = "";
      let v = "";
      while (e.at < e.end) {
        const ek = e.varint();
        if (ek === tag(1, BYTES)) {
          const es = e.span();
          k = exactText(buf, es, e.at);
        } else if (ek === tag(2, BYTES)) {
          const es = e.span();
          v = exactText(buf, es, e.at);
        } else {
          e.skip(ek & 7);
        }
      }
      const entries = d.entries as { key: string; value: string }[];
      if (entries.length === MAX_ENTRIES) {
        throw new GrpcError(GrpcStatus.INVALID_ARGUMENT, `at most ${MAX_ENTRIES} entries per descriptor`);
      }
      entries.push({ key: k, value: v });
    } else if (key === tag(2, BYTES)) {
      const s = r.span();
      const l = new Reader(buf, s, r.at);
      const limit = { requests_per_unit: 0, unit: 0 };
      while (l.at < l.end) {
        const lk = l.varint();
        if (lk === tag(1, VARINT)) limit.requests_per_unit = l.varint() % 2 ** 32;
        else if (lk === tag(2, VARINT)) limit.unit = l.varint() % 2 ** 32;
        else l.skip(lk & 7);
      }
      d.limit = limit;
    } else if (key === tag(3, BYTES)) {
      // google.protobuf.UInt64Value {value = 1}
      const s = r.span();
      const w = new Reader(buf, s, r.at);
      let value = 0;
      while (w.at < w.end) {
        const wk = w.varint();
        if (wk === tag(1, VARINT)) value = w.varint();
        else w.skip(wk & 7);
      }
      d.hits_addend = { value };
    } else if (key === tag(4, VARINT)) {
      d.is_negative_hits = r.varint() !== 0;
    } else {
      r.skip(key & 7);
    }
  }
  return d;
}

type Status = DescriptorStatus;

/** RateLimit {name = 3, requests_per_unit = 1, unit = 2}: its content's size. */
function limitSize(limit: NonNullable<Status["current_limit"]>, nameLength: number): number {
  return (
    (limit.requests_per_unit === 0 ? 0 : 1 + varintSize(limit.requests_per_unit)) +
    (limit.unit === 0 ? 0 : 1 + varintSize(limit.unit)) +
    (nameLength === 0 ? 0 : fieldSize(nameLength))
  );
}

/** Duration {seconds = 1, nanos = 2}: its content's size. */
const durationSize = (d: { seconds: number; nanos: number }): number =>
  (d.seconds === 0 ? 0 : 1 + varintSize(d.seconds)) + (d.nanos === 0 ? 0 : 1 + varintSize(d.nanos));

/** A status's current_limit name's UTF-8 length (0 without one). */
const nameLength = (s: Status): number =>
  s.current_limit?.name === undefined ? 0 : utf8Length(s.current_limit.name);

/** DescriptorStatus {code = 1, current_limit = 2, limit_remaining = 3, duration_until_reset = 4}: its content's size. */
function statusSize(s: Status, name: number): number {
  let size = s.code === 0 ? 0 : 1 + varintSize(s.code);
  if (s.current_limit !== undefined) size += fieldSize(limitSize(s.current_limit, name));
  if (s.limit_remaining !== 0) size += 1 + varintSize(s.limit_remaining);
  if (s.duration_until_reset !== undefined) size += fieldSize(durationSize(s.duration_until_reset));
  return size;
}

/**
 * A RateLimitResponse's bytes after gRPC's 5-byte prefix: overall_code = 1, statuses = 2
 * {code = 1, current_limit = 2, limit_remaining = 3, duration_until_reset = 4},
 * response_headers_to_add = 3 {key = 1, value = 2}. Sizes are worked out twice (to size the
 * buffer, then to write it) rather than kept in arrays: one call writes one or a few statuses.
 */
export function writeRateLimitResponse(answer: RlsAnswer): Framed {
  const { statuses } = answer;
  const headers = answer.response_headers_to_add ?? NO_HEADERS;
  let total = answer.overall_code === 0 ? 0 : 1 + varintSize(answer.overall_code);
  for (const s of statuses) total += fieldSize(statusSize(s, nameLength(s)));
  for (const h of headers) total += fieldSize(fieldSize(utf8Length(h.key)) + fieldSize(utf8Length(h.value)));
  const w = new Writer(prefixed(total));
  w.at = 5;
  if (answer.overall_code !== 0) {
    w.byte(tag(1, VARINT));
    w.varint(answer.overall_code);
  }
  for (const s of statuses) {
    const name = nameLength(s);
    w.open(tag(2, BYTES), statusSize(s, name));
    if (s.code !== 0) {
      w.byte(tag(1, VARINT));
      w.varint(s.code);
    }
    const limit = s.current_limit;
    if (limit !== undefined) {
      w.open(tag(2, BYTES), limitSize(limit, name));
      if (limit.requests_per_unit !== 0) {
        w.byte(tag(1, VARINT));
        w.varint(limit.requests_per_unit);
      }
      if (limit.unit !== 0) {
        w.byte(tag(2, VARINT));
        w.varint(limit.unit);
      }
      if (name > 0) w.string(tag(3, BYTES), limit.name as string, name);
    }
    if (s.limit_remaining !== 0) {
      w.byte(tag(3, VARINT));
      w.varint(s.limit_remaining);
    }
    const d = s.duration_until_reset;
    if (d !== undefined) {
      w.open(tag(4, BYTES), durationSize(d));
      if (d.seconds !== 0) {
        w.byte(tag(1, VARINT));
        w.varint(d.seconds);
      }
      if (d.nanos !== 0) {
        w.byte(tag(2, VARINT));
        w.varint(d.nanos);
      }
    }
  }
  for (const h of headers) {
    const k = utf8Length(h.key);
    const v = utf8Length(h.value);
    w.open(tag(3, BYTES), fieldSize(k) + fieldSize(v));
    w.string(tag(1, BYTES), h.key, k);
    w.string(tag(2, BYTES), h.value, v);
  }
  if (w.at !== 5 + total) throw new Error(`RateLimitResponse written ${w.at - 5} of ${total} bytes`);
  return new Framed(w.buf);
}

const NO_HEADERS: readonly { key: string; value: string }[] = [];
