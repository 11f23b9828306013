// A server-streaming call (grpc.health.v1.Health/Watch): the answer's headers sent with the first
// message, messages as the method writes them, OK in the trailers when it ends (or the listener
// drains), and the method told when the client leaves first.
import type * as http2 from "node:http2";
import {
  framed,
  GrpcError,
  type GrpcMethod,
  GrpcStatus,
  RESPONSE_HEADERS,
  sendOkTrailers,
  statusName,
  trailersOnly,
  writable,
} from "./grpc-protocol.js";

export function serveStream(
  stream: http2.ServerHttp2Stream,
  method: Extract<GrpcMethod, { kind: "server-stream" }>,
  request: Uint8Array,
  call: {
    peer: string | undefined;
    /** Counts the call finished with this status (once, whatever calls it later). */
    finish(status: string): void;
    /** An unexpected failure of the method (answered INTERNAL). */
    onError(error: unknown): void;
    /** The calls open, each by its `end`: a drain ends them all. */
    streams: Set<() => void>;
  },
): void {
  const { peer, finish, onError, streams } = call;
  const closeListeners: (() => void)[] = [];
  let open = true;
  const closed = () => {
    if (!open) return;
    open = false;
    streams.delete(end);
    for (const listener of closeListeners) listener();
  };
  const headers = () => {
    if (!stream.headersSent && writable(stream)) stream.respond(RESPONSE_HEADERS, { waitForTrailers: true });
  };
  function end(): void {
    if (!open) return;
    try {
      headers();
      if (writable(stream)) {
        stream.once("wantTrailers", sendOkTrailers);
        stream.end();
      }
    } catch {
      // closed meanwhile
    }
    finish("OK");
    closed();
  }
  streams.add(end);
  stream.once("close", () => {
    // The client left (cancelled its call or dropped the connection) before the server ended it.
    finish("CANCELLED");
    closed();
  });
  try {
    method.handle(request, {
      peer,
      write(message) {
        if (!open || !writable(stream)) return;
        try {
          headers();
          stream.write(framed(message));
        } catch {
          // closed meanwhile
        }
      },
      end,
      onClose(listener) {
        if (open) closeListeners.push(listener);
        else listener();
      },
    });
  } catch (error) {
    // Before anything was written (a request that does not decode): a status of its own.
    if (!stream.headersSent) {
      const grpc = error instanceof GrpcError;
      if (!grpc) onError(error);
      const code = grpc ? error.code : GrpcStatus.INTERNAL;
      trailersOnly(stream, code, grpc ? error.message : "the call could not be completed");
      finish(statusName(code));
      closed();
      return;
    }
    onError(error);
    end();
  }
}
