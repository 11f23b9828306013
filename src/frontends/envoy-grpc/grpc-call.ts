// One unary or server-streaming call on tollgate's gRPC server (grpc-server.ts): its request
// gathered chunk by chunk within the connection's byte budget, the method run, its answer or failure
// written, and the call counted once as finished. The stream listeners are made once per server and
// find their call on the stream (`this`), so that a call costs one small object, not a set of closures.
import type * as http2 from "node:http2";
import { requestIdOf } from "../../process/request-id.js";
import type { RpcObserver } from "../front-end.js";
import {
  Framed,
  GrpcError,
  type GrpcMethod,
  GrpcStatus,
  PREFIX_BYTES,
  statusName,
  trailersOnly,
  unaryAnswer,
  unframe,
  writable,
} from "./grpc-protocol.js";
import { serveStream } from "./grpc-stream.js";

/** What the server knows of one connection. */
export type SessionState = { peer: string | undefined; buffered: number; open: number; seen: number };

/** A call while its request arrives, kept on its stream: the stream's listeners are shared, not made per call. */
export type Call = {
  name: string;
  method: GrpcMethod;
  /** The call's metadata (its HTTP/2 request headers). */
  headers: http2.IncomingHttpHeaders;
  state: SessionState | undefined;
  /** The request's first chunk; `more` holds the rest when it came in several. */
  first: Buffer | undefined;
  more: Buffer[] | undefined;
  size: number;
  /** Bytes of this call counted in its connection's `buffered`. */
  held: number;
  refused: boolean;
  finished: boolean;
};
export const CALL = Symbol("call");
export type CallStream = http2.ServerHttp2Stream & { [CALL]?: Call };

const EMPTY = Buffer.alloc(0);

export function createCallListeners(server: {
  /** Streams whose request is still arriving. */
  arriving: Map<http2.ServerHttp2Stream, number>;
  /** The server-streaming calls open, each by its `end`. */
  streams: Set<() => void>;
  maxMessageBytes: number;
  sessionBufferBytes: number;
  observer: RpcObserver | undefined;
  onError(error: unknown, method: string, requestId: string | undefined): void;
}) {
  const { arriving, streams, maxMessageBytes, sessionBufferBytes, observer, onError } = server;
  const finish = (call: Call, status: string): void => {
    if (call.finished) return;
    call.finished = true;
    observer?.finished(call.name, status);
  };
  const release = (call: Call): void => {
    if (call.state !== undefined) call.state.buffered -= call.held;
    call.held = 0;
  };
  const fail = (stream: http2.ServerHttp2Stream, call: Call, error: unknown): void => {
    if (error instanceof GrpcError) {
      trailersOnly(stream, error.code, error.message);
      finish(call, statusName(error.code));
      return;
    }
    onError(error, call.name, requestIdOf(call.headers["x-request-id"]));
    trailersOnly(stream, GrpcStatus.INTERNAL, "the call could not be completed");
    finish(call, "INTERNAL");
  };
  const refuse = (stream: http2.ServerHttp2Stream, call: Call, message: string): void => {
    call.refused = true;
    call.first = undefined;
    call.more = undefined;
    arriving.delete(stream);
    release(call);
    trailersOnly(stream, GrpcStatus.RESOURCE_EXHAUSTED, message);
    finish(call, "RESOURCE_EXHAUSTED");
  };

  // The stream listeners, one of each for every call (`this` is the stream).
  function onClose(this: CallStream): void {
    const call = this[CALL];
    if (call === undefined) return;
    arriving.delete(this);
    release(call);
    if (call.state !== undefined) call.state.open -= 1;
    // Every call is counted once as finished: answered, failed, or left by its client.
    finish(call, "CANCELLED");
  }
  function onData(this: CallStream, chunk: Buffer): void {
    const call = this[CALL] as Call;
    if (call.refused) return;
    call.size += chunk.length;
    if (call.size > maxMessageBytes + PREFIX_BYTES) {
      refuse(this, call, `the request message is larger than ${maxMessageBytes} bytes`);
      return;
    }
    const { state } = call;
    if (state !== undefined) {
      if (state.buffered + chunk.length > sessionBufferBytes) {
        refuse(this, call, "the connection holds too many request bytes at once");
        return;
      }
      state.buffered += chunk.length;
      call.held += chunk.length;
    }
    if (call.first === undefined) call.first = chunk;
    else if (call.more === undefined) call.more = [chunk];
    else call.more.push(chunk);
  }
  function onEnd(this: CallStream): void {
    const call = this[CALL] as Call;
    arriving.delete(this);
    if (call.refused || !writable(this)) {
      release(call);
      return;
    }
    const { first, more } = call;
    const body = more === undefined ? (first ?? EMPTY) : Buffer.concat([first as Buffer, ...more], call.size);
    call.first = undefined;
    call.more = undefined;
    release(call);
    answer(this, call, unframe(body));
  }
  const answer = (stream: http2.ServerHttp2Stream, call: Call, request: Uint8Array | GrpcError): void => {
    if (request instanceof GrpcError) {
      fail(stream, call, request);
      return;
    }
    const { method } = call;
    const peer = call.state?.peer;
    if (method.kind === "server-stream") {
      serveStream(stream, method, request, {
        peer,
        finish: (status) => finish(call, status),
        onError: (error) => onError(error, call.name, requestIdOf(call.headers["x-request-id"])),
        streams,
      });
      return;
    }
    let message: Promise<Uint8Array | Framed> | Uint8Array | Framed;
    try {
      message = method.handle(request, { peer, headers: call.headers });
    } catch (error) {
      fail(stream, call, error);
      return;
    }
    if (message instanceof Uint8Array || message instanceof Framed) {
      if (unaryAnswer(stream, message)) finish(call, "OK");
      return;
    }
    message.then(
      (answered) => {
        if (unaryAnswer(stream, answered)) finish(call, "OK");
      },
      (error: unknown) => fail(stream, call, error),
    );
  };

  return { onClose, onData, onEnd };
}
