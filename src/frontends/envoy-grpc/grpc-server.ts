// A gRPC server of tollgate's own: unary and server-streaming methods, length-prefixed messages,
// status in trailers, on tollgate's own HTTP/2 (h2/: frames, HPACK, flow control and abuse bounds,
// over net or TLS sockets). The protocol is small (gRPC over HTTP/2, "PROTOCOL-HTTP2.md" in
// grpc/grpc); node:http2's per-stream objects and events cost more than the whole check they carry.
// docs/performance.md has the figures.
import type { RpcObserver } from "../front-end.js";
import { type Listener, type ListenerAddress, serverListener } from "../listener.js";
import { arrivingSince, type ConnectionBudget, createCallHandler, stopArriving } from "./grpc-call.js";
import type { GrpcMethod } from "./grpc-protocol.js";
import { ErrorCode } from "./h2/frames.js";
import { createH2Server } from "./h2/server.js";
import type { Connection } from "./h2/state.js";

export type GrpcServerOptions = {
  /** By full path, `/package.Service/Method`. */
  methods: ReadonlyMap<string, GrpcMethod>;
  tls?: { cert: Buffer; key: Buffer } | undefined;
  /** The largest request message taken; a larger one is answered RESOURCE_EXHAUSTED. */
  maxMessageBytes?: number;
  /** Server-streaming calls open at once (default MAX_SERVER_STREAMS); past it, RESOURCE_EXHAUSTED. */
  maxServerStreams?: number;
  observer?: RpcObserver | undefined;
  /** Unexpected failures inside a method (answered INTERNAL); never request contents but the call's x-request-id. */
  onError(error: unknown, method: string, requestId: string | undefined): void;
  /** Called when the listener starts to drain, before its connections are told to go away. */
  onDrain?: () => void;
};

/** gRPC's own default (grpc-go, grpc-java, grpc-js) for a received message. */
const DEFAULT_MAX_MESSAGE_BYTES = 4 * 1024 * 1024;
/** After GOAWAY, how long calls in flight may take before their connections are cut. */
const DRAIN_GRACE_MS = 5_000;
/** A request whose message has not fully arrived this long after its stream opened is reset. */
const REQUEST_TIMEOUT_MS = 10_000;
/** Request bytes one connection may hold at once, across its streams, before a stream is refused. */
const SESSION_BUFFER_BYTES = 32 * 1024 * 1024;
/**
 * Request bytes the server may hold at once, across its connections: without it, eight connections
 * at their own bound fill deploy/kubernetes's 256 MiB memory limit.
 */
const SERVER_BUFFER_BYTES = 64 * 1024 * 1024;
/** A connection with no stream open and none begun for this long is closed (Envoy's idle timeout is shorter). */
const SESSION_IDLE_MS = 5 * 60_000;
/**
 * An answer that has waited this long for the client's flow-control windows without a byte of it
 * moving is reset: a client that never reads must not hold its streams and their answers.
 */
const ANSWER_STALL_S = 60;
/** A connection that has not sent its preface and SETTINGS this long after it opened is closed. */
const PREFACE_TIMEOUT_S = 10;
/**
 * Server-streaming calls (health Watch) open at once, across connections: a Watch holds its stream
 * and its request headers (up to 64 KiB) for as long as its client keeps it, and each connection's
 * 1,000 streams alone bound nothing once connections multiply. A gRPC client that checks health
 * this way opens one per connection; Envoy and Kubernetes probes call Check, which holds nothing.
 */
const MAX_SERVER_STREAMS = 1_000;

export function createGrpcServer(options: GrpcServerOptions) {
  const { methods, observer, onError } = options;
  const maxMessageBytes = options.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES;
  const streams = new Set<() => void>();
  const budgets = new WeakMap<Connection, ConnectionBudget>();
  /** Seconds since the server started, counted by the sweep: a clock that costs nothing to read per call. */
  const clock = { seconds: 0 };

  const handler = createCallHandler({
    methods,
    budgetOf(stream) {
      let budget = budgets.get(stream.connection);
      if (budget === undefined) {
        budget = { buffered: 0 };
        budgets.set(stream.connection, budget);
      }
      return budget;
    },
    clock,
    streams,
    maxMessageBytes,
    maxServerStreams: options.maxServerStreams ?? MAX_SERVER_STREAMS,
    sessionBufferBytes: SESSION_BUFFER_BYTES,
    serverBufferBytes: SERVER_BUFFER_BYTES,
    observer,
    onError,
  });
  const { server, connections } = createH2Server({ tls: options.tls, handler, clock });

  // One sweep a second, not a timer per call or per connection.
  const sweeper = setInterval(() => {
    clock.seconds += 1;
    // A call stamped `since` opened at most a second before that stamp was read: one second more
    // makes each bound a floor, never cutting short.
    const limit = clock.seconds - REQUEST_TIMEOUT_MS / 1000 - 1;
    for (const connection of connections) {
      for (const stream of connection.streams.values()) {
        const since = arrivingSince(stream);
        if (since === undefined || since > limit) continue;
        stopArriving(stream);
        connection.resetStream(stream, ErrorCode.CANCEL);
      }
    }
    // A connection with nothing open and no call begun for a while, or that never spoke HTTP/2, is let go.
    const idleSince = clock.seconds - SESSION_IDLE_MS / 1000 - 1;
    const silentSince = clock.seconds - PREFACE_TIMEOUT_S - 1;
    const stalledSince = clock.seconds - ANSWER_STALL_S - 1;
    for (const connection of connections) {
      if (connection.waiting.size > 0) connection.resetStalled(stalledSince);
      const idle = connection.streams.size === 0 && connection.seen <= idleSince;
      if (idle || (!connection.settled && connection.seen <= silentSince)) connection.destroy();
    }
  }, 1_000);
  sweeper.unref();
  server.once("close", () => clearInterval(sweeper));

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
      for (const connection of connections) {
        for (const stream of connection.streams.values()) {
          if (arrivingSince(stream) === undefined) continue;
          stopArriving(stream);
          connection.resetStream(stream, ErrorCode.CANCEL);
        }
      }
      // Whatever is still open after the grace (a client that never reads its answer) is cut.
      setTimeout(() => {
        for (const connection of connections) connection.destroy();
      }, DRAIN_GRACE_MS).unref();
    }
    for (const connection of connections) connection.drain();
    return closed;
  };
  const destroy = () => {
    for (const connection of [...connections]) connection.destroy();
  };
  return { server, close, destroy };
}

/** The gRPC server as a listener: drain ends the streaming calls and sends every connection GOAWAY. */
export function grpcListener(address: ListenerAddress, options: GrpcServerOptions): Listener {
  const { server, close, destroy } = createGrpcServer(options);
  return serverListener(address, server, close, destroy);
}
