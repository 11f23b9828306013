// A Listener over one node:http server: the public API, the admin API and the check listener.
import type { RequestListener } from "node:http";
import { type Listener, type ListenerAddress, serverListener } from "../frontends/listener.js";
import { createHttpServer } from "./server.js";

/** What an HTTP listener serves: a request handler (an express app is one). */
export type HttpHandler = RequestListener;

export function httpListener(address: ListenerAddress, handler: HttpHandler): Listener {
  const server = createHttpServer(handler);
  let closed: Promise<void> | undefined;
  /** Stops accepting (once) and closes the idle connections; resolves once the last has closed. */
  const close = (): Promise<void> => {
    // Before start, close() passes ERR_SERVER_NOT_RUNNING to its callback: closed all the same.
    closed ??= new Promise((resolve) => server.close(() => resolve()));
    server.closeIdleConnections();
    return closed;
  };
  return serverListener(address, server, close, () => server.closeAllConnections());
}
