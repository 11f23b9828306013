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

/** An answer with no message: status in the headers, stream ended ("Trailers-Only"). */
function trailersOnly(stream: http2.ServerHttp2Stream, code: number, message: string): void {
  if (stream.destroyed || stream.headersSent) return;
  stream.respond(
    { ...RESPONSE_HEADERS, "grpc-status": String(code), "grpc-message": statusMessage(message) },
    { endStream: true },
  );
}

const OK_TRAILERS = { "grpc-status": "0" };
/** A listener shared by every call (no closure per call); `this` is the stream. */
function sendOkTrailers(this: http2.ServerHttp2Stream): void {
  this.sendTrailers(OK_TRAILERS);
}

function unaryAnswer(stream: http2.ServerHttp2Stream, message: Answer): void {
  if (stream.destroyed) return;
  stream.respond(RESPONSE_HEADERS, { waitForTrailers: true });
  stream.once("wantTrailers", sendOkTrailers);
  stream.end(message instanceof Framed ? message.bytes : framed(message));
}

export function createGrpcServer(options: GrpcServerOptions) {
  const { methods, observer, onError } = options;
  const maxMessageBytes = options.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES;
  const streams = new Set<() => void>();
  const sessions = new Set<http2.ServerHttp2Session>();
  const peers = new WeakMap<http2.ServerHttp2Session, string | undefined>();

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

  const finish = (name: string, code: number) => observer?.finished(name, statusName(code));

  const fail = (stream: http2.ServerHttp2Stream, name: string, error: unknown) => {
    if (error instanceof GrpcError) {
      trailersOnly(stream, error.code, error.message);
      finish(name, error.code);
      return;
    }
    onError(error, name);
    trailersOnly(stream, GrpcStatus.INTERNAL, "the call could not be completed");
    finish(name, GrpcStatus.INTERNAL);
  };

  const serve = (
    stream: http2.ServerHttp2Stream,
    name: string,
    method: GrpcMethod,
    body: Buffer,
    peer: string | undefined,
  ) => {
    const request = unframe(body);
    if (request instanceof GrpcError) {
      fail(stream, name, request);
      return;
    }
    if (method.kind === "server-stream") {
      serveStream(stream, name, method, request, peer);
      return;
    }
    let answer: Promise<Answer> | Answer;
    try {
      answer = method.handle(request, { peer });
    } catch (error) {
      fail(stream, name, error);
      return;
    }
    if (answer instanceof Uint8Array || answer instanceof Framed) {
      unaryAnswer(stream, answer);
      finish(name, GrpcStatus.OK);
      return;
    }
    answer.then(
      (message) => {
        unaryAnswer(stream, message);
        finish(name, GrpcStatus.OK);
      },
      (error: unknown) => fail(stream, name, error),
    );
  };

  const serveStream = (
    stream: http2.ServerHttp2Stream,
    name: string,
    method: Extract<GrpcMethod, { kind: "server-stream" }>,
    request: Uint8Array,
    peer: string | undefined,
  ) => {
    const closeListeners: (() => void)[] = [];
    let open = true;
    const closed = () => {
      if (!open) return;
      open = false;
      streams.delete(end);
      for (const listener of closeListeners) listener();
    };
    const end = () => {
      if (!open) return;
      if (!stream.destroyed) {
        stream.once("wantTrailers", () => stream.sendTrailers({ "grpc-status": "0" }));
        stream.end();
      }
      finish(name, GrpcStatus.OK);
      closed();
    };
    streams.add(end);
    stream.once("close", () => {
      // The client left (cancelled its call or dropped the connection) before the server ended it.
      if (open) observer?.finished(name, "CANCELLED");
      closed();
    });
    stream.respond(RESPONSE_HEADERS, { waitForTrailers: true });
    try {
      method.handle(request, {
        peer,
        write(message) {
          if (open && !stream.destroyed) stream.write(framed(message));
        },
        end,
        onClose(listener) {
          if (open) closeListeners.push(listener);
          else listener();
        },
      });
    } catch (error) {
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
    observer?.started(name);
    const contentType = headers["content-type"] ?? "";
    if (headers[":method"] !== "POST" || !contentType.startsWith("application/grpc")) {
      // Not a gRPC call at all: an HTTP answer, as gRPC servers give one.
      if (!stream.destroyed) {
        stream.respond({ ":status": headers[":method"] !== "POST" ? 405 : 415 }, { endStream: true });
      }
      observer?.finished(name, "NOT_GRPC");
      return;
    }
    if (method === undefined) {
      stream.resume();
      trailersOnly(stream, GrpcStatus.UNIMPLEMENTED, `unknown method ${path.slice(0, 200)}`);
      finish(name, GrpcStatus.UNIMPLEMENTED);
      return;
    }
    const peer =
      stream.session === undefined ? undefined : peers.get(stream.session as http2.ServerHttp2Session);
    const chunks: Buffer[] = [];
    let size = 0;
    let refused = false;
    stream.on("data", (chunk: Buffer) => {
      if (refused) return;
      size += chunk.length;
      if (size > maxMessageBytes + PREFIX_BYTES) {
        refused = true;
        chunks.length = 0;
        trailersOnly(
          stream,
          GrpcStatus.RESOURCE_EXHAUSTED,
          `the request message is larger than ${maxMessageBytes} bytes`,
        );
        finish(name, GrpcStatus.RESOURCE_EXHAUSTED);
        return;
      }
      chunks.push(chunk);
    });
    stream.once("end", () => {
      if (refused || stream.destroyed) return;
      const body = chunks.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks, size);
      serve(stream, name, method, body, peer);
    });
  });

  server.on("session", (session) => {
    sessions.add(session);
    // Read once per connection: session.socket is a proxy, slow to go through on every call.
    peers.set(session, session.socket?.remoteAddress);
    session.on("error", () => undefined);
    session.once("close", () => sessions.delete(session));
  });
  const keepAlive = (socket: Socket) => socket.setKeepAlive(true, KEEPALIVE_MS);
  server.on("connection", keepAlive);
  // A TLS handshake that fails, or bytes that are not HTTP/2, end that connection only.
  server.on("sessionError", () => undefined);
  server.on("clientError", () => undefined);

  return { server, sessions, streams };
}

/** The gRPC server as a listener: drain ends the streaming calls and sends every connection GOAWAY. */
export function grpcListener(address: ListenerAddress, options: GrpcServerOptions): Listener {
  const { server, sessions, streams } = createGrpcServer(options);
  let closed: Promise<void> | undefined;
  let draining = false;
  const close = (): Promise<void> => {
    closed ??= new Promise((resolve) => server.close(() => resolve()));
    if (!draining) {
      draining = true;
      options.onDrain?.();
      for (const end of [...streams]) end();
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
