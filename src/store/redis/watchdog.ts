// Drops a Redis connection that stops answering without closing, so that ioredis makes a new one.
import type { Redis } from "ioredis";
import { withDeadline } from "../failure.js";
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

/**
 * Whether a new connection to the server `connection` talks to (for Sentinel, the master the
 * Sentinels name now) answers a PING within `ms`. Made and closed for this question alone.
 */
async function answersAfresh(connection: Redis, ms: number): Promise<boolean> {
  const probe = connection.duplicate({
    lazyConnect: true,
    enableOfflineQueue: true,
    enableReadyCheck: false,
    retryStrategy: () => null,
    maxRetriesPerRequest: 0,
    connectTimeout: ms,
    commandTimeout: ms,
    failoverDetector: false,
  });
  probe.on("error", () => undefined);
  try {
    await withDeadline(
      probe.connect().then(() => probe.ping()),
      ms,
    );
    return true;
  } catch {
    return false;
  } finally {
    probe.disconnect();
  }
}

/** The connections that carry a client's commands: itself, or a Cluster's node connections. */
const connectionsOf = (client: RedisClient): Redis[] => (isCluster(client) ? client.nodes("all") : [client]);

/**
 * Sends each ready connection a PING every `intervalMs` (one at a time per connection). When one is
 * still unanswered after `silenceMs`, a fresh connection to the same server is tried: if it answers
 * while the old one still receives nothing, the path of the old one is dark and it is dropped; if it
 * does not, Redis itself is stalled (busy, paused, overloaded) and the old connection is kept, so
 * that the commands it already carried run once, when Redis resumes, and are answered (a dropped
 * connection fails them unanswered, though Redis may still run them: a withdrawn limiter call could
 * not take back what it counted). A reply of any kind, an
 * error reply included, shows the connection alive; a PING that fails with its connection is
 * forgotten with it.
 */
export function watchConnections(client: RedisClient, timings: WatchdogTimings): { stop(): void } {
  const pending = new Map<Redis, number>();
  const confirming = new Set<Redis>();
  // A Redis that was stalled answers the fresh connection as it resumes, maybe before it has worked
  // through the old one's backlog: anything the old one receives meanwhile, or within a grace
  // period after, shows it alive.
  const graceMs = Math.min(1_000, timings.silenceMs / 2);
  const confirmDark = (connection: Redis, sentAt: number): void => {
    confirming.add(connection);
    const { stream } = connection;
    let heard = false;
    const onData = (): void => {
      heard = true;
    };
    stream.on("data", onData);
    void answersAfresh(connection, timings.silenceMs)
      .then(async (fresh) => {
        if (fresh && !heard) await new Promise((resolve) => setTimeout(resolve, graceMs));
        return fresh && !heard;
      })
      .then((dark) => {
        stream.off("data", onData);
        confirming.delete(connection);
        const unchanged = pending.get(connection) === sentAt && connection.stream === stream;
        if (!dark || !unchanged || connection.status !== "ready") return;
        pending.delete(connection);
        dropConnection(connection, silenceError(timings.silenceMs));
      });
  };
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
      } else if (now - sentAt >= timings.silenceMs && !confirming.has(connection)) {
        confirmDark(connection, sentAt);
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
