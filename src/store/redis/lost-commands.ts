// A Redis Cluster node connection that closes fails the commands it had written, rather than let
// ioredis send them again on another connection, where they would run a second time.
import type { Cluster, Redis } from "ioredis";

/** ioredis's message for a command whose connection closed (utils CONNECTION_CLOSED_ERROR_MSG). */
const CONNECTION_CLOSED = "Connection is closed.";

export class CommandLostError extends Error {
  constructor() {
    super(
      "Connection to a Redis Cluster node closed before its answer: the command may have run, so it is not sent again",
    );
    this.name = "CommandLostError";
  }
}

type QueueFlush = (error: Error, options?: { offlineQueue?: boolean; commandQueue?: boolean }) => void;

/**
 * ioredis fails a closing node connection's commands with "Connection is closed.", and the Cluster
 * client sends every command failed so 100 ms later (retryDelayOnFailover) to another connection,
 * whether or not the closed one had written it: a path dark one way that the watchdog drops, a master
 * that ran the command and died before answering, a node dropped from the slot map with answers on
 * their way. What the closed connection had written fails with CommandLostError instead, as on one
 * Redis (maxRetriesPerRequest 0), so that it runs at most once; what it still held unsent (it was
 * connecting) keeps the retry, as does a command refused without being sent and every redirection
 * (MOVED, ASK, TRYAGAIN, CLUSTERDOWN: a node that answers so did not run the command).
 */
export function failLostCommands(cluster: Cluster): void {
  cluster.on("+node", (node: Redis) => {
    const target = node as unknown as { flushQueue?: QueueFlush };
    // ioredis's own method, not its API: should a release rename it, nothing is patched (and the
    // Cluster test of a lost connection's commands fails) rather than a node's connection throwing.
    if (typeof target.flushQueue !== "function") return;
    const flush = target.flushQueue.bind(node);
    target.flushQueue = (error, options) => {
      if (error.message !== CONNECTION_CLOSED || options?.commandQueue === false) {
        flush(error, options);
        return;
      }
      flush(new CommandLostError(), { ...options, offlineQueue: false });
      flush(error, { ...options, commandQueue: false });
    };
  });
}
