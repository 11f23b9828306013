// The listening side of tollgate's HTTP/2: a net.Server for h2c (prior knowledge, as Envoy and gRPC
// clients speak it in a mesh) or a tls.Server that takes only connections that chose "h2" by ALPN,
// each accepted socket becoming an H2Connection.
import * as net from "node:net";
import * as tls from "node:tls";
import type { Clock } from "./budget.js";
import { H2Connection } from "./connection.js";
import type { StreamHandler } from "./state.js";

/** Dead peers (a sidecar's host gone without a FIN) are found by TCP keepalive after this long idle. */
const KEEPALIVE_MS = 30_000;

export function createH2Server(options: {
  tls?: { cert: Buffer; key: Buffer } | undefined;
  handler: StreamHandler;
  clock: Clock;
}): { server: net.Server; connections: Set<H2Connection> } {
  const { handler, clock } = options;
  const connections = new Set<H2Connection>();
  const accept = (socket: net.Socket) => {
    socket.setNoDelay(true);
    socket.setKeepAlive(true, KEEPALIVE_MS);
    const connection = new H2Connection(socket, handler, clock, socket.remoteAddress);
    connections.add(connection);
    socket.once("close", () => connections.delete(connection));
  };
  if (options.tls === undefined) {
    const server = net.createServer(accept);
    return { server, connections };
  }
  const server = tls.createServer({ cert: options.tls.cert, key: options.tls.key, ALPNProtocols: ["h2"] });
  server.on("secureConnection", (socket: tls.TLSSocket) => {
    // HTTP/2 over TLS is chosen by ALPN (RFC 9113 section 3.2); anything else is not spoken here.
    if (socket.alpnProtocol !== "h2") {
      socket.destroy();
      return;
    }
    accept(socket);
  });
  // A failed handshake ends that connection only.
  server.on("tlsClientError", (_error, socket) => socket.destroy());
  return { server, connections };
}
