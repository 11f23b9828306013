// A listener as a value: where it binds, and how it starts, drains and stops. The composition root
// lists them (src/listeners.ts); start-up, readiness, signals, start-up problems and the WORKERS
// supervisor iterate over that list and name none of them.
import cluster from "node:cluster";
import type { Server, Socket } from "node:net";
import type { SettingName } from "../config/setting-names.js";

/** Where a listener binds, and the settings that choose it (start-up problems name them). */
export type ListenerAddress = {
  /** Its key among the URLs of the ready line and the hosts of the supervisor's workers_started. */
  name: string;
  host: string;
  port: number;
  settings: { host: SettingName; port: SettingName };
  /**
   * Connections held at once (MAX_CONNECTIONS); node closes any more as they arrive. Every
   * connection is a file descriptor of the one process, and Redis's connections need them too.
   */
  maxConnections?: number;
  /** Called for each connection closed for being past maxConnections. */
  onFull?: () => void;
};

export type Listener = Readonly<ListenerAddress> & {
  /** Listens; rejects with the system's error (EADDRINUSE, EACCES…) when it cannot. */
  start(): Promise<void>;
  /** Stops accepting connections and closes the idle ones; requests in flight are answered. */
  drain(): void;
  /**
   * Resolves once every connection has closed, draining first if that has not begun. `force`
   * closes the connections still open at once, requests in flight or not (tests, never a stop).
   */
  stop(options?: { force?: boolean }): Promise<void>;
};

/**
 * A WORKERS worker's bound, counted here rather than by server.maxConnections: node:cluster's
 * primary accepts, and a worker at its maxConnections hands the connection back, which the primary
 * hands to the next worker, and back again, for as long as every worker is full: a core spent on
 * it, the connection never closed, nothing logged. Closed here once handed over, as it arrives.
 */
function boundInWorker(server: Server, max: number, onFull: (() => void) | undefined): void {
  let held = 0;
  server.on("connection", (socket: Socket) => {
    if (held >= max) {
      socket.destroy();
      onFull?.();
      return;
    }
    held += 1;
    socket.once("close", () => {
      held -= 1;
    });
  });
}

/**
 * A listener over one server: `close` stops accepting and begins closing connections (resolving
 * once the last has closed), `force` closes those still open at once (tests, never a stop).
 */
export function serverListener(
  address: ListenerAddress,
  server: Server,
  close: () => Promise<void>,
  force: () => void,
): Listener {
  const { maxConnections, onFull } = address;
  if (maxConnections !== undefined && cluster.isWorker) boundInWorker(server, maxConnections, onFull);
  else if (maxConnections !== undefined) server.maxConnections = maxConnections;
  if (onFull !== undefined) server.on("drop", () => onFull());
  return {
    name: address.name,
    host: address.host,
    settings: address.settings,
    /** The port asked for, or once listening on port 0 (tests), the one the system chose. */
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
      if (options.force === true) force();
      return done;
    },
  };
}
