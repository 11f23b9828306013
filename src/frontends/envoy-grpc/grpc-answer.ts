// The answers written on a gRPC call's stream (PROTOCOL-HTTP2.md in grpc/grpc): a message then OK in
// the trailers, a status alone ("Trailers-Only"), or an HTTP status for what is not a gRPC call. The
// constant header blocks are encoded once; each function is a no-op on a stream already closed.

import { Framed } from "./grpc-protocol.js";
import { encodeBlock } from "./h2/encode.js";
import { respond, sendUnary } from "./h2/send.js";
import type { Connection, H2Stream } from "./h2/state.js";

const RESPONSE_FIELDS = [
  [":status", "200"],
  ["content-type", "application/grpc"],
  ["grpc-accept-encoding", "identity"],
] as const;
export const RESPONSE_HEADERS = encodeBlock(RESPONSE_FIELDS);
export const OK_TRAILERS = encodeBlock([["grpc-status", "0"]]);
/** RFC 9110 (405 Method Not Allowed): the answer names the methods allowed; a gRPC call is a POST. */
const METHOD_NOT_ALLOWED = encodeBlock([
  [":status", "405"],
  ["allow", "POST"],
]);
const UNSUPPORTED_MEDIA_TYPE = encodeBlock([[":status", "415"]]);
/** A grpc-message longer than this is cut: it is a human's hint, and must fit one HEADERS frame. */
const MAX_MESSAGE_CHARS = 1024;

/** grpc-message is percent-encoded (PROTOCOL-HTTP2.md). */
function statusMessage(message: string): string {
  const text = message.slice(0, MAX_MESSAGE_CHARS);
  try {
    return encodeURIComponent(text);
  } catch {
    // A lone surrogate (or a pair the slice cut in half) makes encodeURIComponent throw.
    return encodeURIComponent(text.replace(/[\uD800-\uDFFF]/g, "\uFFFD"));
  }
}

/** An answer with no message: status in the headers, stream ended ("Trailers-Only"). */
export function trailersOnly(connection: Connection, stream: H2Stream, code: number, message: string): void {
  if (stream.closed || stream.headersSent) return;
  const block = encodeBlock([
    ...RESPONSE_FIELDS,
    ["grpc-status", String(code)],
    ["grpc-message", statusMessage(message)],
  ]);
  respond(connection, stream, block, true);
}

/** The trailers that end a call whose answer has begun with another status than OK. */
export function statusTrailers(code: number, message: string): Buffer {
  return encodeBlock([
    ["grpc-status", String(code)],
    ["grpc-message", statusMessage(message)],
  ]);
}

/** The HTTP answer, with no body, to a request that is not a gRPC call: 405 to a method other than POST, else 415. */
export function notGrpc(connection: Connection, stream: H2Stream, method: string | undefined): void {
  if (stream.closed || stream.headersSent) return;
  respond(connection, stream, method === "POST" ? UNSUPPORTED_MEDIA_TYPE : METHOD_NOT_ALLOWED, true);
}

/** A unary call's answer: its message, then OK in the trailers. */
export function unaryAnswer(connection: Connection, stream: H2Stream, message: Uint8Array | Framed): void {
  if (message instanceof Framed)
    sendUnary(connection, stream, RESPONSE_HEADERS, message.bytes, true, OK_TRAILERS);
  else sendUnary(connection, stream, RESPONSE_HEADERS, message, false, OK_TRAILERS);
}
