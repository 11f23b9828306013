// Drops a Redis connection that stops answering without closing, so that ioredis makes a new one.
import type { Redis } from "ioredis";
import type { RedisClient } from "./client.js";
import { isCluster } from "./is-cluster.js";

/**
 * How often a connection is probed, and how long it may leave a probe unanswered. A network path
 * that goes dark (a dropped route, a frozen host, a failover that moved an address) sends no reset:
 * TCP alone would notice after minutes of retransmissions, and every check would degrade meanwhile.
 */
export type WatchdogTimings = { intervalMs: number; silenceMs: number };

export const silenceError = (silenceMs: number): Error =>
  new Error(`no answer from Redis in ${silenceMs} ms: connection dropped, reconnecting`);

/**
 * Closes a connection at once: on a dark path a polite close would wait for a FIN that is never
 * acknowledged. ioredis then reconnects (one server, Sentinel) or, for a Cluster node, forgets it
 * and connects anew on the next command routed there.
 */
export function dropConnection(connection: Redis, error: Error): void {
  connection.stream?.destroy(error);
}

/** The connections that carry a client's commands: itself, or a Cluster's node connections. */
const connectionsOf = (client: RedisClient): Redis[] => (isCluster(client) ? client.nodes("all") : [client]);

/**
 * Sends each ready connection a PING every `intervalMs` (one at a time per connection) and drops
 * a connection whose PING is still unanswered after `silenceMs`. A reply of any kind, an error reply
 * included, shows the connection alive; a PING that fails with its connection is forgotten with it.
 */
export function watchConnections(client: RedisClient, timings: WatchdogTimings): { stop(): void } {
  const pending = new Map<Redis, number>();
  const timer = setInterval(() => {
    const now = Date.now();
    for (const connection of pending.keys()) {
      if (connection.status !== "ready") pending.delete(connection);
    }
    for (const connection of connectionsOf(client)) {
      if (connection.status !== "ready") continue;
      const sentAt = pending.get(connection);
      if (sentAt === undefined) {
        pending.set(connection, now);
        const answered = () => {
          if (pending.get(connection) === now) pending.delete(connection);
        };
        connection.ping().then(answered, answered);
      } else if (now - sentAt >= timings.silenceMs) {
        pending.delete(connection);
        dropConnection(connection, silenceError(timings.silenceMs));
      }
    }
  }, timings.intervalMs);
  timer.unref();
  return {
    stop: () => {
      clearInterval(timer);
      pending.clear();
    },
  };
}
