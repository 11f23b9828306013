// A gRPC server of tollgate's own on node:http2: unary and server-streaming methods, length-prefixed
// messages, status in trailers. The protocol is small (gRPC over HTTP/2, "PROTOCOL-HTTP2.md" in
// grpc/grpc); what a general library adds on top (interceptors, per-call objects, channelz, metadata
// classes) is cost on a path every proxied request waits on. docs/performance.md has the figures
// that chose this over @grpc/grpc-js.
import * as http2 from "node:http2";
import type { Socket } from "node:net";
import type { RpcObserver } from "../front-end.js";
import { type Listener, type ListenerAddress, serverListener } from "../listener.js";
import { CALL, type Call, type CallStream, createCallListeners, type SessionState } from "./grpc-call.js";
import { type GrpcMethod, GrpcStatus, trailersOnly, writable } from "./grpc-protocol.js";

export type GrpcServerOptions = {
  /** By full path, `/package.Service/Method`. */
  methods: ReadonlyMap<string, GrpcMethod>;
  tls?: { cert: Buffer; key: Buffer } | undefined;
  /** The largest request message taken; a larger one is answered RESOURCE_EXHAUSTED. */
  maxMessageBytes?: number;
  observer?: RpcObserver | undefined;
  /** Unexpected failures inside a method (answered INTERNAL); never request contents but the call's x-request-id. */
  onError(error: unknown, method: string, requestId: string | undefined): void;
  /** Called when the listener starts to drain, before its connections are told to go away. */
  onDrain?: () => void;
};

/** gRPC's own default (grpc-go, grpc-java, grpc-js) for a received message. */
const DEFAULT_MAX_MESSAGE_BYTES = 4 * 1024 * 1024;
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

/** A request whose message has not fully arrived this long after its stream opened is reset. */
const REQUEST_TIMEOUT_MS = 10_000;
/** Request bytes one connection may hold at once, across its streams, before a stream is refused. */
const SESSION_BUFFER_BYTES = 32 * 1024 * 1024;
/** A connection with no stream open and none begun for this long is closed (Envoy's idle timeout is shorter). */
const SESSION_IDLE_MS = 5 * 60_000;

const ignore = () => undefined;

export function createGrpcServer(options: GrpcServerOptions) {
  const { methods, observer, onError } = options;
  const maxMessageBytes = options.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES;
  const streams = new Set<() => void>();
  const sessions = new Set<http2.ServerHttp2Session>();
  const states = new WeakMap<http2.ServerHttp2Session, SessionState>();
  /** Streams whose request is still arriving, with the second they opened: reset past REQUEST_TIMEOUT_MS. */
  const arriving = new Map<http2.ServerHttp2Stream, number>();
  /** Seconds since the server started, counted by the sweep: a clock that costs nothing to read per call. */
  let seconds = 0;

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

  // One sweep a second, not a timer per call or per connection (node refreshes a connection's
  // timeout on every frame): the requests every proxied request waits on stay lean.
  const sweeper = setInterval(() => {
    seconds += 1;
    // A call stamped `since` opened at most a second before that stamp was read: one second more
    // makes each bound a floor, never cutting short.
    const limit = seconds - REQUEST_TIMEOUT_MS / 1000 - 1;
    for (const [stream, since] of arriving) {
      if (since > limit) break;
      arriving.delete(stream);
      if (!stream.destroyed) stream.close(http2.constants.NGHTTP2_CANCEL);
    }
    // A connection with nothing open and no call begun for a while (or that never spoke HTTP/2) is let go.
    const idleSince = seconds - SESSION_IDLE_MS / 1000 - 1;
    for (const session of sessions) {
      const state = states.get(session);
      if (state !== undefined && state.open === 0 && state.seen <= idleSince) session.destroy();
    }
  }, 1_000);
  sweeper.unref();
  server.once("close", () => clearInterval(sweeper));

  const { onClose, onData, onEnd } = createCallListeners({
    arriving,
    streams,
    maxMessageBytes,
    sessionBufferBytes: SESSION_BUFFER_BYTES,
    observer,
    onError,
  });

  server.on("stream", (stream: CallStream, headers) => {
    // A client that resets its stream or drops the connection must never take the process down.
    stream.on("error", ignore);
    const path = headers[":path"] ?? "";
    const method = methods.get(path);
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
      observer?.started(UNKNOWN_METHOD);
      observer?.finished(UNKNOWN_METHOD, "NOT_GRPC");
      return;
    }
    if (method === undefined) {
      stream.resume();
      trailersOnly(stream, GrpcStatus.UNIMPLEMENTED, `unknown method ${path.slice(0, 200)}`);
      observer?.started(UNKNOWN_METHOD);
      observer?.finished(UNKNOWN_METHOD, "UNIMPLEMENTED");
      return;
    }
    const session = stream.session as http2.ServerHttp2Session | undefined;
    const state = session === undefined ? undefined : states.get(session);
    if (state !== undefined) {
      state.open += 1;
      state.seen = seconds;
    }
    const call: Call = {
      name: path.slice(1),
      method,
      headers,
      state,
      first: undefined,
      more: undefined,
      size: 0,
      held: 0,
      refused: false,
      finished: false,
    };
    stream[CALL] = call;
    observer?.started(call.name);
    stream.on("close", onClose);
    arriving.set(stream, seconds);
    stream.on("data", onData);
    stream.on("end", onEnd);
  });

  server.on("session", (session) => {
    sessions.add(session);
    // Read once per connection: session.socket is a proxy, slow to go through on every call.
    states.set(session, { peer: session.socket?.remoteAddress, buffered: 0, open: 0, seen: seconds });
    session.on("error", ignore);
    session.once("close", () => sessions.delete(session));
  });
  const keepAlive = (socket: Socket) => socket.setKeepAlive(true, KEEPALIVE_MS);
  server.on("connection", keepAlive);
  // A TLS handshake that fails, or bytes that are not HTTP/2, end that connection only.
  server.on("sessionError", ignore);
  server.on("clientError", ignore);

  let closed: Promise<void> | undefined;
  let draining = false;
  /** Stops accepting, then GOAWAY: no new streams; the calls in flight are answered, then each connection closes. */
  const close = (): Promise<void> => {
    closed ??= new Promise((resolve) => server.close(() => resolve()));
    if (!draining) {
      draining = true;
      options.onDrain?.();
      for (const end of [...streams]) end();
      // A request still arriving is not in flight: it is reset rather than waited for.
      for (const stream of arriving.keys()) {
        if (!stream.destroyed) stream.close(http2.constants.NGHTTP2_CANCEL);
      }
      arriving.clear();
      // Whatever is still open after the grace (a client that never reads its answer) is cut.
      setTimeout(() => {
        for (const session of sessions) session.destroy();
      }, DRAIN_GRACE_MS).unref();
    }
    for (const session of sessions) if (!session.closed) session.close();
    return closed;
  };
  const destroy = () => {
    for (const session of sessions) session.destroy();
  };
  return { server, close, destroy };
}

/** The gRPC server as a listener: drain ends the streaming calls and sends every connection GOAWAY. */
export function grpcListener(address: ListenerAddress, options: GrpcServerOptions): Listener {
  const { server, close, destroy } = createGrpcServer(options);
  return serverListener(address, server, close, destroy);
}
