// One unary or server-streaming call on tollgate's gRPC server (grpc-server.ts): its request
// gathered chunk by chunk within the connection's byte budget, the method run, its answer or failure
// written, and the call counted once as finished. One handler object serves every stream of the
// server; a call costs one small object, kept on its stream. Past its grpc-timeout, a call unanswered is
// answered DEADLINE_EXCEEDED; then, or when its client resets it first, its caller leaves it (Caller).
import { requestIdOf } from "../../process/request-id.js";
import { leave } from "../../ratelimit/limiter.js";
import type { RpcObserver } from "../front-end.js";
import { createDeadlines, type Timed } from "./call-deadlines.js";
import { notGrpc, trailersOnly, unaryAnswer } from "./grpc-answer.js";
import {
  type CallInfo,
  Framed,
  GrpcError,
  type GrpcMethod,
  GrpcStatus,
  PREFIX_BYTES,
  statusName,
  unframe,
} from "./grpc-protocol.js";
import { serveStream, streamCloses } from "./grpc-stream.js";
import type { H2Stream, StreamHandler } from "./h2/state.js";

/** What the gRPC server counts per connection: request bytes held across its calls. */
export type ConnectionBudget = { buffered: number };

/** A call, kept on its stream; in the server's deadlines (Timed) when it states one. */
type Call = Timed & {
  stream: H2Stream;
  name: string;
  method: GrpcMethod;
  budget: ConnectionBudget;
  /** The request's first chunk; `more` holds the rest when it came in several. */
  first: Buffer | undefined;
  more: Buffer[] | undefined;
  size: number;
  /** Bytes of this call counted in its connection's `buffered`. */
  held: number;
  /**
   * The second the stream opened while its request is still arriving (the server's sweep resets it
   * past REQUEST_TIMEOUT_MS), else -1. On the call, not in a Map of the server: see stream-table.ts.
   */
  arrivingSince: number;
  refused: boolean;
  finished: boolean;
  /** What the method was given of its call, once it runs: the Caller that leaves. */
  info: CallInfo | undefined;
  /** A server-streaming call's end with a status, once it runs. */
  stop: ((code: number, message: string) => void) | undefined;
};

/** The second a stream's request began to arrive, while it still does; undefined otherwise. */
export function arrivingSince(stream: H2Stream): number | undefined {
  const call = stream.call as Call | undefined;
  return call === undefined || call.arrivingSince < 0 ? undefined : call.arrivingSince;
}

/** The stream is no longer waited on for its request (the sweep has reset it, or the server drains). */
export function stopArriving(stream: H2Stream): void {
  const call = stream.call as Call | undefined;
  if (call !== undefined) call.arrivingSince = -1;
}

const EMPTY = Buffer.alloc(0);
const UNKNOWN_METHOD = "unknown";
const DEADLINE_PASSED = "the call's deadline passed before its answer";

export function createCallHandler(server: {
  methods: ReadonlyMap<string, GrpcMethod>;
  /** Each connection's budget. */
  budgetOf(stream: H2Stream): ConnectionBudget;
  clock: { seconds: number };
  /** The server-streaming calls open, each by its `end`. */
  streams: Set<() => void>;
  maxMessageBytes: number;
  /** Server-streaming calls (health Watch) open at once on the whole server: past it, RESOURCE_EXHAUSTED. */
  maxServerStreams: number;
  sessionBufferBytes: number;
  /** Request bytes the whole server may hold at once, across its connections. */
  serverBufferBytes: number;
  observer: RpcObserver | undefined;
  onError(error: unknown, method: string, requestId: string | undefined): void;
}): StreamHandler {
  const {
    methods,
    clock,
    streams,
    maxMessageBytes,
    maxServerStreams,
    sessionBufferBytes,
    serverBufferBytes,
    observer,
    onError,
  } = server;
  /** Request bytes held across every connection: each connection's bound alone grows with their number. */
  const total: ConnectionBudget = { buffered: 0 };
  const finish = (call: Call, status: string): void => {
    if (call.finished) return;
    call.finished = true;
    deadlines.remove(call);
    observer?.finished(call.name, status);
  };
  const release = (call: Call): void => {
    call.budget.buffered -= call.held;
    total.buffered -= call.held;
    call.held = 0;
  };
  const fail = (stream: H2Stream, call: Call, error: unknown): void => {
    // Counted before the answer is written: writing it closes the stream, which counts CANCELLED.
    if (error instanceof GrpcError) {
      finish(call, statusName(error.code));
      trailersOnly(stream.connection, stream, error.code, error.message);
      return;
    }
    onError(error, call.name, requestIdOf(stream.headers["x-request-id"]));
    finish(call, "INTERNAL");
    trailersOnly(stream.connection, stream, GrpcStatus.INTERNAL, "the call could not be completed");
  };
  const refuse = (call: Call, message: string, code: number = GrpcStatus.RESOURCE_EXHAUSTED): void => {
    const { stream } = call;
    call.refused = true;
    call.first = undefined;
    call.more = undefined;
    call.arrivingSince = -1;
    release(call);
    finish(call, statusName(code));
    trailersOnly(stream.connection, stream, code, message);
  };
  /** Past its deadline, unanswered: DEADLINE_EXCEEDED, and its caller leaves (what it counted is taken back). */
  const deadlines = createDeadlines<Call>((call) => {
    const { stream } = call;
    if (call.finished || stream.closed) return;
    if (call.stop !== undefined) call.stop(GrpcStatus.DEADLINE_EXCEEDED, DEADLINE_PASSED);
    else refuse(call, DEADLINE_PASSED, GrpcStatus.DEADLINE_EXCEEDED);
    if (call.info !== undefined) leave(call.info);
  });
  /** A stream that is no call of ours: answered at once, counted under "unknown". */
  const reject = (answer: () => void, status: string): void => {
    observer?.started(UNKNOWN_METHOD);
    observer?.finished(UNKNOWN_METHOD, status);
    answer();
  };

  const answerOk = (stream: H2Stream, call: Call, message: Uint8Array | Framed): void => {
    if (stream.closed) return;
    finish(call, "OK");
    unaryAnswer(stream.connection, stream, message);
  };
  const answer = (stream: H2Stream, call: Call, request: Uint8Array | GrpcError): void => {
    if (request instanceof GrpcError) {
      fail(stream, call, request);
      return;
    }
    const { method } = call;
    const peer = stream.connection.peer;
    if (method.kind === "server-stream") {
      if (streams.size >= maxServerStreams) {
        fail(stream, call, new GrpcError(GrpcStatus.RESOURCE_EXHAUSTED, "too many streaming calls are open"));
        return;
      }
      call.stop = serveStream(stream, method, request, {
        peer,
        finish: (status) => finish(call, status),
        onError: (error) => onError(error, call.name, requestIdOf(stream.headers["x-request-id"])),
        streams,
      });
      return;
    }
    let message: Promise<Uint8Array | Framed> | Uint8Array | Framed;
    const info: CallInfo = { peer, headers: stream.headers, left: false, withdrawal: undefined };
    call.info = info;
    try {
      message = method.handle(request, info);
    } catch (error) {
      fail(stream, call, error);
      return;
    }
    if (message instanceof Uint8Array || message instanceof Framed) {
      answerOk(stream, call, message);
      return;
    }
    message.then(
      (answered) => answerOk(stream, call, answered),
      (error: unknown) => fail(stream, call, error),
    );
  };

  return {
    open(stream) {
      const { headers, connection } = stream;
      if (stream.tooLarge) {
        reject(
          () =>
            trailersOnly(
              connection,
              stream,
              GrpcStatus.RESOURCE_EXHAUSTED,
              "the call's metadata is too large",
            ),
          "RESOURCE_EXHAUSTED",
        );
        return;
      }
      const path = headers[":path"] ?? "";
      const contentType = headers["content-type"] ?? "";
      if (headers[":method"] !== "POST" || !contentType.startsWith("application/grpc")) {
        // Not a gRPC call at all: an HTTP answer, as gRPC servers give one.
        reject(() => notGrpc(connection, stream, headers[":method"]), "NOT_GRPC");
        return;
      }
      const method = methods.get(path);
      if (method === undefined) {
        const message = `unknown method ${path.slice(0, 200)}`;
        reject(() => trailersOnly(connection, stream, GrpcStatus.UNIMPLEMENTED, message), "UNIMPLEMENTED");
        return;
      }
      const call: Call = {
        deadline: 0,
        slot: -1,
        stream,
        name: path.slice(1),
        method,
        budget: server.budgetOf(stream),
        first: undefined,
        more: undefined,
        size: 0,
        held: 0,
        arrivingSince: clock.seconds,
        refused: false,
        finished: false,
        info: undefined,
        stop: undefined,
      };
      stream.call = call;
      observer?.started(call.name);
      deadlines.add(call, headers["grpc-timeout"]);
    },
    data(stream, view, last) {
      const call = stream.call as Call | undefined;
      if (call === undefined || call.refused) return;
      // A view kept past this read would hold the whole read (padding, other frames) against a
      // budget that counts only its bytes: a chunk that is not the request's last is copied when
      // its read is much larger than it.
      const chunk = last || view.length * 2 >= view.buffer.byteLength ? view : Buffer.from(view);
      call.size += chunk.length;
      if (call.size > maxMessageBytes + PREFIX_BYTES) {
        refuse(call, `the request message is larger than ${maxMessageBytes} bytes`);
        return;
      }
      const { budget } = call;
      // A request whole in this read is answered within it: it holds nothing past the read, and is
      // taken however much the requests still arriving hold.
      const held = last && call.first === undefined ? 0 : chunk.length;
      if (budget.buffered + held > sessionBufferBytes) {
        refuse(call, "the connection holds too many request bytes at once");
        return;
      }
      if (total.buffered + held > serverBufferBytes) {
        refuse(call, "the server holds too many request bytes at once");
        return;
      }
      budget.buffered += held;
      total.buffered += held;
      call.held += held;
      if (call.first === undefined) call.first = chunk;
      else if (call.more === undefined) call.more = [chunk];
      else call.more.push(chunk);
    },
    end(stream) {
      const call = stream.call as Call | undefined;
      if (call === undefined) return;
      call.arrivingSince = -1;
      if (call.refused || stream.closed) {
        release(call);
        return;
      }
      const { first, more } = call;
      const body =
        more === undefined ? (first ?? EMPTY) : Buffer.concat([first as Buffer, ...more], call.size);
      call.first = undefined;
      call.more = undefined;
      release(call);
      answer(stream, call, unframe(body));
    },
    error(error) {
      onError(error, UNKNOWN_METHOD, undefined);
    },
    close(stream) {
      const call = stream.call as Call | undefined;
      if (call === undefined) return;
      call.arrivingSince = -1;
      release(call);
      // Gone before its answer: the client no longer waits for it (Envoy resets a call at its timeout).
      if (!call.finished && call.info !== undefined) leave(call.info);
      // Every call is counted once as finished: answered, failed, or left by its client.
      finish(call, "CANCELLED");
      streamCloses.get(stream)?.();
    },
  };
}
