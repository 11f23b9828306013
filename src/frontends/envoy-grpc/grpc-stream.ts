// A server-streaming call (grpc.health.v1.Health/Watch): the answer's headers sent with the first
// message, messages as the method writes them, OK in the trailers when it ends (or the listener
// drains; another status when its deadline passes), and the method told when the client leaves first.
import { OK_TRAILERS, RESPONSE_HEADERS, statusTrailers, trailersOnly } from "./grpc-answer.js";
import { framed, GrpcError, type GrpcMethod, GrpcStatus, statusName } from "./grpc-protocol.js";
import { respond, sendData, sendTrailers } from "./h2/send.js";
import type { H2Stream } from "./h2/state.js";

/** The close listener of each streaming call, by its stream: called by the call handler's close. */
export const streamCloses = new WeakMap<H2Stream, () => void>();

/** Runs the call; returns its end with a status (a deadline passed), or undefined when it ended at once. */
export function serveStream(
  stream: H2Stream,
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
): ((code: number, message: string) => void) | undefined {
  const { peer, finish, onError, streams } = call;
  const { connection } = stream;
  const closeListeners: (() => void)[] = [];
  let open = true;
  const closed = () => {
    if (!open) return;
    open = false;
    streams.delete(end);
    streamCloses.delete(stream);
    for (const listener of closeListeners) listener();
  };
  const headers = () => {
    if (!stream.headersSent) respond(connection, stream, RESPONSE_HEADERS, false);
  };
  const endWith = (trailers: Buffer, status: string): void => {
    if (!open) return;
    finish(status);
    if (!stream.closed) {
      headers();
      sendTrailers(connection, stream, trailers);
    }
    closed();
  };
  function end(): void {
    endWith(OK_TRAILERS, "OK");
  }
  streams.add(end);
  // The client left (cancelled its call or dropped the connection) before the server ended it.
  streamCloses.set(stream, closed);
  try {
    method.handle(request, {
      peer,
      write(message) {
        if (!open || stream.closed) return;
        headers();
        sendData(connection, stream, framed(message), false);
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
      finish(statusName(code));
      trailersOnly(connection, stream, code, grpc ? error.message : "the call could not be completed");
      closed();
      return undefined;
    }
    onError(error);
    end();
  }
  return (code, message) => endWith(statusTrailers(code, message), statusName(code));
}
