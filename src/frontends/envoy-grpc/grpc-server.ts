// A gRPC server of tollgate's own on node:http2: unary and server-streaming methods, length-prefixed
// messages, status in trailers. The protocol is small (gRPC over HTTP/2, "PROTOCOL-HTTP2.md" in
// grpc/grpc); what a general library adds on top (interceptors, per-call objects, channelz, metadata
// classes) is cost on a path every proxied request waits on. docs/performance.md has the figures
// that chose this over @grpc/grpc-js.
import * as http2 from "node:http2";
import type { Socket } from "node:net";
import type { RpcObserver } from "../front-end.js";
import type { Listener, ListenerAddress } from "../listener.js";

/** The gRPC status codes tollgate answers with (google.rpc.Code). */
export const GrpcStatus = {
  OK: 0,
  INVALID_ARGUMENT: 3,
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

/** What a method learns of its call besides the request message. */
export type CallInfo = {
  /** The connection's remote address. */
  peer: string | undefined;
};

/** A server-streaming call as its method holds it. */
export type ServerStream = CallInfo & {
  write(message: Uint8Array): void;
  /** Ends the call with OK. */
  end(): void;
  /** Called once when the call ends for any reason (the client left, the server drains). */
  onClose(listener: () => void): void;
};

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

type Answer = Uint8Array | Framed;

export type GrpcMethod =
  | { kind: "unary"; handle(request: Uint8Array, call: CallInfo): Promise<Answer> | Answer }
  | { kind: "server-stream"; handle(request: Uint8Array, call: ServerStream): void };

export type GrpcServerOptions = {
  /** By full path, `/package.Service/Method`. */
  methods: ReadonlyMap<string, GrpcMethod>;
  tls?: { cert: Buffer; key: Buffer } | undefined;
  /** The largest request message taken; a larger one is answered RESOURCE_EXHAUSTED. */
  maxMessageBytes?: number;
  observer?: RpcObserver | undefined;
  /** Unexpected failures inside a method (answered INTERNAL); never request contents. */
  onError(error: unknown, method: string): void;
  /** Called when the listener starts to drain, before its connections are told to go away. */
  onDrain?: () => void;
};

/** gRPC's own default (grpc-go, grpc-java, grpc-js) for a received message. */
const DEFAULT_MAX_MESSAGE_BYTES = 4 * 1024 * 1024;
/** A request message's prefix: one flag byte (compressed or not) and a 4-byte big-endian length. */
const PREFIX_BYTES = 5;
/** Dead peers (a sidecar's host gone without a FIN) are found by TCP keepalive after this long idle. */
const KEEPALIVE_MS = 30_000;
/**
 * Streams open at once on one connection. Envoy keeps one connection per worker and opens another
 * when a connection's streams are all in use, so this bounds one connection's memory, not
 * throughput.
 */
const MAX_CONCURRENT_STREAMS = 1000;

const UNKNOWN_METHOD = "unknown";
/** After GOAWAY, how long calls in flight may take before their connections are cut. */
const DRAIN_GRACE_MS = 5_000;

const RESPONSE_HEADERS = {
  ":status": 200,
  "content-type": "application/grpc",
  "grpc-accept-encoding": "identity",
};

/** A message with its 5-byte prefix, uncompressed. */
function framed(message: Uint8Array): Buffer {
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

/** grpc-message is percent-encoded (PROTOCOL-HTTP2.md). */
function statusMessage(message: string): string {
  return encodeURIComponent(message);
}

function statusName(code: number): string {
  return STATUS_NAMES.get(code) ?? String(code);
}

/**
 * Whether an answer can still be written: a stream the client reset, or whose connection dropped,
 * is closed before node says it is destroyed, and writing to it throws.
 */
const writable = (stream: http2.ServerHttp2Stream): boolean => !stream.destroyed && !stream.closed;

/** An answer with no message: status in the headers, stream ended ("Trailers-Only"). */
function trailersOnly(stream: http2.ServerHttp2Stream, code: number, message: string): void {
  if (!writable(stream) || stream.headersSent) return;
  try {
    stream.respond(
      { ...RESPONSE_HEADERS, "grpc-status": String(code), "grpc-message": statusMessage(message) },
      { endStream: true },
    );
  } catch {
    // Closed between the check and the write: nobody is left to answer.
  }
}

const OK_TRAILERS = { "grpc-status": "0" };
/** A listener shared by every call (no closure per call); `this` is the stream. */
function sendOkTrailers(this: http2.ServerHttp2Stream): void {
  if (writable(this)) this.sendTrailers(OK_TRAILERS);
}

function unaryAnswer(stream: http2.ServerHttp2Stream, message: Answer): boolean {
  if (!writable(stream)) return false;
  try {
    stream.respond(RESPONSE_HEADERS, { waitForTrailers: true });
    stream.once("wantTrailers", sendOkTrailers);
    stream.end(message instanceof Framed ? message.bytes : framed(message));
    return true;
  } catch {
    return false;
  }
}

/** A request whose message has not fully arrived this long after its stream opened is reset. */
const REQUEST_TIMEOUT_MS = 10_000;
/** Request bytes one connection may hold at once, across its streams, before a stream is refused. */
const SESSION_BUFFER_BYTES = 32 * 1024 * 1024;
/** A connection with no stream open and no frame for this long is closed (Envoy's idle timeout is shorter). */
const SESSION_IDLE_MS = 5 * 60_000;

type SessionState = { peer: string | undefined; buffered: number; open: number };

export function createGrpcServer(options: GrpcServerOptions) {
  const { methods, observer, onError } = options;
  const maxMessageBytes = options.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES;
  const streams = new Set<() => void>();
  const sessions = new Set<http2.ServerHttp2Session>();
  const states = new WeakMap<http2.ServerHttp2Session, SessionState>();
  /** Streams whose request is still arriving, with when they opened: reset past REQUEST_TIMEOUT_MS. */
  const arriving = new Map<http2.ServerHttp2Stream, number>();

  const settings = { maxConcurrentStreams: MAX_CONCURRENT_STREAMS };
  const server =
    options.tls === undefined
      ? http2.createServer({ settings })
      : http2.createSecureServer({
          settings,
          cert: options.tls.cert,
          key: options.tls.key,
          allowHTTP1: false,
        });

  // One sweep a second, not a timer per call: the requests every proxied request waits on stay lean.
  const sweeper = setInterval(() => {
    const limit = performance.now() - REQUEST_TIMEOUT_MS;
    for (const [stream, since] of arriving) {
      if (since > limit) break;
      arriving.delete(stream);
      if (!stream.destroyed) stream.close(http2.constants.NGHTTP2_CANCEL);
    }
  }, 1_000);
  sweeper.unref();
  server.once("close", () => clearInterval(sweeper));

  const serveStream = (
    stream: http2.ServerHttp2Stream,
    name: string,
    method: Extract<GrpcMethod, { kind: "server-stream" }>,
    request: Uint8Array,
    peer: string | undefined,
    finish: (status: string) => void,
  ) => {
    const closeListeners: (() => void)[] = [];
    let open = true;
    const closed = () => {
      if (!open) return;
      open = false;
      streams.delete(end);
      for (const listener of closeListeners) listener();
    };
    const headers = () => {
      if (!stream.headersSent && writable(stream))
        stream.respond(RESPONSE_HEADERS, { waitForTrailers: true });
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
        if (!grpc) onError(error, name);
        const code = grpc ? error.code : GrpcStatus.INTERNAL;
        trailersOnly(stream, code, grpc ? error.message : "the call could not be completed");
        finish(statusName(code));
        closed();
        return;
      }
      onError(error, name);
      end();
    }
  };

  server.on("stream", (stream, headers) => {
    // A client that resets its stream or drops the connection must never take the process down.
    stream.on("error", () => undefined);
    const path = headers[":path"] ?? "";
    const method = methods.get(path);
    const name = method === undefined ? UNKNOWN_METHOD : path.slice(1);
    const session = stream.session as http2.ServerHttp2Session | undefined;
    const state = session === undefined ? undefined : states.get(session);
    if (state !== undefined) state.open += 1;
    observer?.started(name);
    // Every call is counted once as finished: answered, failed, or left by its client.
    let finished = false;
    let held = 0;
    const release = () => {
      if (state !== undefined) state.buffered -= held;
      held = 0;
    };
    const finish = (status: string) => {
      if (finished) return;
      finished = true;
      observer?.finished(name, status);
    };
    stream.once("close", () => {
      arriving.delete(stream);
      release();
      if (state !== undefined) state.open -= 1;
      finish("CANCELLED");
    });
    const fail = (error: unknown) => {
      if (error instanceof GrpcError) {
        trailersOnly(stream, error.code, error.message);
        finish(statusName(error.code));
        return;
      }
      onError(error, name);
      trailersOnly(stream, GrpcStatus.INTERNAL, "the call could not be completed");
      finish("INTERNAL");
    };
    const contentType = headers["content-type"] ?? "";
    if (headers[":method"] !== "POST" || !contentType.startsWith("application/grpc")) {
      // Not a gRPC call at all: an HTTP answer, as gRPC servers give one.
      stream.resume();
      if (writable(stream)) {
        try {
          stream.respond({ ":status": headers[":method"] !== "POST" ? 405 : 415 }, { endStream: true });
        } catch {
          // closed meanwhile
        }
      }
      finish("NOT_GRPC");
      return;
    }
    if (method === undefined) {
      stream.resume();
      trailersOnly(stream, GrpcStatus.UNIMPLEMENTED, `unknown method ${path.slice(0, 200)}`);
      finish("UNIMPLEMENTED");
      return;
    }
    arriving.set(stream, performance.now());
    const chunks: Buffer[] = [];
    let size = 0;
    let refused = false;
    const refuse = (message: string) => {
      refused = true;
      chunks.length = 0;
      arriving.delete(stream);
      release();
      trailersOnly(stream, GrpcStatus.RESOURCE_EXHAUSTED, message);
      finish("RESOURCE_EXHAUSTED");
    };
    stream.on("data", (chunk: Buffer) => {
      if (refused) return;
      size += chunk.length;
      if (size > maxMessageBytes + PREFIX_BYTES) {
        refuse(`the request message is larger than ${maxMessageBytes} bytes`);
        return;
      }
      if (state !== undefined) {
        if (state.buffered + chunk.length > SESSION_BUFFER_BYTES) {
          refuse("the connection holds too many request bytes at once");
          return;
        }
        state.buffered += chunk.length;
        held += chunk.length;
      }
      chunks.push(chunk);
    });
    stream.once("end", () => {
      arriving.delete(stream);
      if (refused || !writable(stream)) {
        release();
        return;
      }
      const body = chunks.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks, size);
      release();
      const request = unframe(body);
      if (request instanceof GrpcError) {
        fail(request);
        return;
      }
      const peer = state?.peer;
      if (method.kind === "server-stream") {
        serveStream(stream, name, method, request, peer, finish);
        return;
      }
      let answer: Promise<Answer> | Answer;
      try {
        answer = method.handle(request, { peer });
      } catch (error) {
        fail(error);
        return;
      }
      if (answer instanceof Uint8Array || answer instanceof Framed) {
        if (unaryAnswer(stream, answer)) finish("OK");
        return;
      }
      answer.then((message) => {
        if (unaryAnswer(stream, message)) finish("OK");
      }, fail);
    });
  });

  server.on("session", (session) => {
    sessions.add(session);
    // Read once per connection: session.socket is a proxy, slow to go through on every call.
    const state: SessionState = { peer: session.socket?.remoteAddress, buffered: 0, open: 0 };
    states.set(session, state);
    session.on("error", () => undefined);
    session.once("close", () => sessions.delete(session));
    // A connection that went silent with nothing open (or never spoke HTTP/2 at all) is let go.
    session.setTimeout(SESSION_IDLE_MS, () => {
      if (state.open === 0) session.destroy();
    });
  });
  const keepAlive = (socket: Socket) => socket.setKeepAlive(true, KEEPALIVE_MS);
  server.on("connection", keepAlive);
  // A TLS handshake that fails, or bytes that are not HTTP/2, end that connection only.
  server.on("sessionError", () => undefined);
  server.on("clientError", () => undefined);

  return { server, sessions, streams, arriving };
}

/** The gRPC server as a listener: drain ends the streaming calls and sends every connection GOAWAY. */
export function grpcListener(address: ListenerAddress, options: GrpcServerOptions): Listener {
  const { server, sessions, streams, arriving } = createGrpcServer(options);
  let closed: Promise<void> | undefined;
  let draining = false;
  const close = (): Promise<void> => {
    closed ??= new Promise((resolve) => server.close(() => resolve()));
    if (!draining) {
      draining = true;
      options.onDrain?.();
      for (const end of [...streams]) end();
      // A request still arriving is not in flight: it is reset rather than waited for.
      for (const stream of arriving.keys())
        if (!stream.destroyed) stream.close(http2.constants.NGHTTP2_CANCEL);
      arriving.clear();
      // Whatever is still open after the grace (a client that never reads its answer) is cut.
      setTimeout(() => {
        for (const session of sessions) session.destroy();
      }, DRAIN_GRACE_MS).unref();
    }
    // GOAWAY: no new streams; the calls in flight are answered, then the connection closes.
    for (const session of sessions) if (!session.closed) session.close();
    return closed;
  };
  return {
    name: address.name,
    host: address.host,
    settings: address.settings,
    get port(): number {
      const bound = server.address();
      return bound !== null && typeof bound === "object" ? bound.port : address.port;
    },
    start: () =>
      new Promise((resolve, reject) => {
        server.once("error", reject);
        server.listen(address.port, address.host, () => {
          server.off("error", reject);
          resolve();
        });
      }),
    drain: () => {
      void close();
    },
    stop(options = {}) {
      const done = close();
      if (options.force === true) for (const session of sessions) session.destroy();
      return done;
    },
  };
}
