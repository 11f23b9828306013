// The check listener's HTTP/1.1 server: node:net and a parser of tollgate's own (head.ts, body.ts)
// instead of node:http. Every proxied request waits on this listener, and node:http spent more CPU
// per request (its streams, its header objects, its response machinery) than the whole cached
// check; measured in docs/performance.md. The bounds are node:http's, as the other listeners keep
// them (http/server.ts): 64 KiB of head, 10 s for a head and 30 s for a request to arrive, 75 s idle.
import { createServer, type Socket } from "node:net";
import { HEADERS_TIMEOUT_MS, MAX_HEADER_BYTES, REQUEST_TIMEOUT_MS } from "../../http/server.js";
import { type Listener, type ListenerAddress, serverListener } from "../listener.js";
import { type Answer, KEEP_ALIVE_SECONDS } from "./answer.js";
import { Connection } from "./connection.js";
import { type ConnectionContext, type Exchange, Phase } from "./exchange.js";

/** The answer to a request whose route threw, unless it had answered already. */
const failed: Answer = {
  status: 503,
  headers: { "content-type": "application/json" },
  body: JSON.stringify({ error: "unavailable", message: "The request could not be completed" }),
};

/** How long a connection that sent its closing answer may take to close its side: then it is cut. */
const LINGER_SECONDS = 2;

export type Http1Routes = {
  /** Whether a request to `url` wants its body read whole before it is served (else dropped). */
  wantsBody(url: string): boolean;
  serve(exchange: Exchange): void;
  /** A body read whole: refused 413 past this, and 503 past maxHeldBytes across all connections. */
  maxBodyBytes: number;
  maxHeldBytes: number;
  /**
   * A bug, logged: an answer that could not be written (a header that cannot be sent), or a route
   * that threw (its request is answered 503, and the process goes on).
   */
  onError(error: unknown): void;
};

/** The timeouts, from when the phase they bound began, in the sweep's whole seconds. */
function expired(connection: Connection, now: number): "408" | "cut" | undefined {
  const elapsed = now - connection.since;
  switch (connection.phase) {
    case Phase.Head:
      return elapsed * 1000 > HEADERS_TIMEOUT_MS ? "408" : undefined;
    case Phase.Body:
      return elapsed * 1000 > REQUEST_TIMEOUT_MS ? "408" : undefined;
    case Phase.Idle:
      return elapsed > KEEP_ALIVE_SECONDS ? "cut" : undefined;
    case Phase.Closing:
      return elapsed > LINGER_SECONDS ? "cut" : undefined;
    default:
      return undefined;
  }
}

export function http1Listener(address: ListenerAddress, routes: Http1Routes): Listener {
  const connections = new Set<Connection>();
  let seconds = 0;
  let draining = false;
  const context: ConnectionContext = {
    wantsBody: routes.wantsBody,
    serve: (exchange) => {
      try {
        routes.serve(exchange);
      } catch (error) {
        routes.onError(error);
        exchange.respond(failed);
      }
    },
    maxBodyBytes: routes.maxBodyBytes,
    maxHeldBytes: routes.maxHeldBytes,
    maxHeaderBytes: MAX_HEADER_BYTES,
    held: { bytes: 0 },
    now: () => seconds,
    draining: () => draining,
    onError: routes.onError,
  };
  // allowHalfOpen: a client's FIN does not end the answer it still waits for (connection.ts closes).
  // A connection accepted as a drain begins is served like the others: its answer closes it.
  const server = createServer({ allowHalfOpen: true, noDelay: true }, (socket: Socket) => {
    const connection = new Connection(socket, context);
    connections.add(connection);
    socket.once("close", () => connections.delete(connection));
  });
  // One sweep a second over every connection, as node:http checks its own (no timer per request).
  const sweep = setInterval(() => {
    seconds += 1;
    for (const connection of connections) {
      const verdict = expired(connection, seconds);
      if (verdict === "408") connection.fail(408, "bad_request", "The request took too long to arrive");
      else if (verdict === "cut") connection.socket.destroy();
    }
  }, 1000);
  sweep.unref();

  let closed: Promise<void> | undefined;
  const close = (): Promise<void> => {
    draining = true;
    closed ??= new Promise((resolve) =>
      server.close(() => {
        clearInterval(sweep);
        resolve();
      }),
    );
    // Idle connections close now (once the answers a slow reader has not taken yet are out); the
    // others after the answer under way, which says so.
    for (const connection of connections) {
      if (!connection.idle) continue;
      if (connection.socket.writableLength > 0) connection.close();
      else connection.socket.destroy();
    }
    return closed;
  };
  const force = () => {
    for (const connection of connections) connection.socket.destroy();
  };
  return serverListener(address, server, close, force);
}
