// gRPC over HTTP/2 as tollgate's server speaks it ("PROTOCOL-HTTP2.md" in grpc/grpc): the status
// codes, the 5-byte message prefix, and what a method sees of its call.
import type { Caller } from "../../ratelimit/limiter.js";
import type { HeaderList } from "./h2/hpack.js";

/** The gRPC status codes tollgate answers with (google.rpc.Code). */
export const GrpcStatus = {
  OK: 0,
  INVALID_ARGUMENT: 3,
  DEADLINE_EXCEEDED: 4,
  NOT_FOUND: 5,
  RESOURCE_EXHAUSTED: 8,
  UNIMPLEMENTED: 12,
  INTERNAL: 13,
  UNAVAILABLE: 14,
  UNAUTHENTICATED: 16,
} as const;

const STATUS_NAMES = new Map<number, string>(Object.entries(GrpcStatus).map(([name, code]) => [code, name]));

/** A call's end with a non-OK status; `message` is for the caller and must hold no secret. */
export class GrpcError extends Error {
  constructor(
    readonly code: number,
    message: string,
  ) {
    super(message);
  }
}

/**
 * An answer whose bytes already hold the 5-byte prefix (see `prefixed`): sent as they are, with no
 * copy into a framed buffer.
 */
export class Framed {
  constructor(readonly bytes: Buffer) {}
}

/** A buffer for a message of `length` bytes after its prefix, with the prefix written. */
export function prefixed(length: number): Buffer {
  const frame = Buffer.allocUnsafe(PREFIX_BYTES + length);
  frame[0] = 0;
  frame.writeUInt32BE(length, 1);
  return frame;
}

/** A request message's prefix: one flag byte (compressed or not) and a 4-byte big-endian length. */
export const PREFIX_BYTES = 5;

/** A message with its 5-byte prefix, uncompressed. */
export function framed(message: Uint8Array): Buffer {
  const frame = Buffer.allocUnsafe(PREFIX_BYTES + message.length);
  frame[0] = 0;
  frame.writeUInt32BE(message.length, 1);
  frame.set(message, PREFIX_BYTES);
  return frame;
}

/** The one request message of a call's body, or the error that ends the call. */
export function unframe(body: Buffer): Uint8Array | GrpcError {
  if (body.length < PREFIX_BYTES) {
    return new GrpcError(GrpcStatus.INVALID_ARGUMENT, "the request holds no complete message");
  }
  if (body[0] !== 0) {
    // Compression is never negotiated: grpc-accept-encoding says identity only.
    return new GrpcError(GrpcStatus.UNIMPLEMENTED, "compressed messages are not supported");
  }
  const length = body.readUInt32BE(1);
  if (body.length !== PREFIX_BYTES + length) {
    return new GrpcError(
      GrpcStatus.INVALID_ARGUMENT,
      body.length < PREFIX_BYTES + length
        ? "the request message is truncated"
        : "a unary call takes one message",
    );
  }
  return body.subarray(PREFIX_BYTES);
}

export function statusName(code: number): string {
  return STATUS_NAMES.get(code) ?? String(code);
}

/** grpc-timeout's longest value: 8 digits, then the unit. */
const MAX_TIMEOUT_DIGITS = 8;

/**
 * A grpc-timeout value (PROTOCOL-HTTP2.md: 1 to 8 ASCII digits, then H, M, S, m, u or n) in
 * milliseconds; undefined when malformed. 0 is taken (a deadline already past), as grpc-go, grpc-js
 * and gRPC's C core take it.
 */
export function grpcTimeoutMs(value: string): number | undefined {
  const digits = value.length - 1;
  if (digits < 1 || digits > MAX_TIMEOUT_DIGITS) return undefined;
  let unitMs: number;
  switch (value.charCodeAt(digits)) {
    case 0x48: // H
      unitMs = 3_600_000;
      break;
    case 0x4d: // M
      unitMs = 60_000;
      break;
    case 0x53: // S
      unitMs = 1_000;
      break;
    case 0x6d: // m
      unitMs = 1;
      break;
    case 0x75: // u
      unitMs = 1e-3;
      break;
    case 0x6e: // n
      unitMs = 1e-6;
      break;
    default:
      return undefined;
  }
  let count = 0;
  for (let i = 0; i < digits; i += 1) {
    const digit = value.charCodeAt(i) - 0x30;
    if (digit < 0 || digit > 9) return undefined;
    count = count * 10 + digit;
  }
  return count * unitMs;
}

/**
 * What a method learns of its call besides the request message. A unary call is also its method's
 * Caller: a method that counts on the store leaves its withdrawal there, refused when the call ends
 * without its answer (past its grpc-timeout, or reset by the client).
 */
export type CallInfo = Caller & {
  /** The connection's remote address. */
  peer: string | undefined;
  /** The call's metadata (its HTTP/2 request headers, lower-case names): x-request-id, traceparent. Unary calls only. */
  headers?: HeaderList;
};

/** A server-streaming call as its method holds it. */
export type ServerStream = CallInfo & {
  write(message: Uint8Array): void;
  /** Ends the call with OK. */
  end(): void;
  /** Called once when the call ends for any reason (the client left, the server drains). */
  onClose(listener: () => void): void;
};

export type GrpcMethod =
  | {
      kind: "unary";
      handle(request: Uint8Array, call: CallInfo): Promise<Uint8Array | Framed> | Uint8Array | Framed;
    }
  | { kind: "server-stream"; handle(request: Uint8Array, call: ServerStream): void };
