// One write to Redis per event-loop turn: the checks that arrived together go out together.
import type { Cluster, Redis } from "ioredis";
import { isCluster } from "./is-cluster.js";

type Corkable = { cork(): void; uncork(): void };

/** The most hot calls one write carries. */
export const MAX_BATCH = 32;

const perClient = new WeakMap<Redis | Cluster, () => void>();

/** The client's coalescer, one per client: the scripts and the window counters share its writes. */
export function coalescerOf(redis: Redis | Cluster): () => void {
  let coalesce = perClient.get(redis);
  if (coalesce === undefined) {
    coalesce = createWriteCoalescer(redis);
    perClient.set(redis, coalesce);
  }
  return coalesce;
}

/**
 * Returns the function a hot call runs before it writes. The first call of a turn corks the
 * connection (on a cluster, every ready master's), and the turn's check phase (setImmediate, after
 * every I/O callback of the turn) uncorks it: one writev instead of one write per check, and one read
 * for Redis instead of one per check. The price: a call waits for the rest of its turn before Redis
 * can start on it (at most one loop iteration, since a pending setImmediate keeps the poll phase from
 * blocking), where before Redis could work while Node finished the turn. Under load the saved
 * syscalls outweigh that; the bench's p99 columns are where to check it. A write carries at most
 * MAX_BATCH calls: a turn that brings more flushes early, so that a burst neither waits for its whole
 * turn nor reaches Redis as one block that the other processes' checks queue behind. A connection
 * that is not ready is left alone (its commands are queued).
 */
function createWriteCoalescer(redis: Redis | Cluster): () => void {
  let corked: Corkable[] | undefined;
  let calls = 0;
  const uncork = (): void => {
    const streams = corked ?? [];
    corked = undefined;
    for (const stream of streams) stream.uncork();
  };
  const ready = (client: Redis): Corkable | undefined =>
    client.status === "ready" ? client.stream : undefined;

  return () => {
    if (corked !== undefined) {
      if (calls < MAX_BATCH) {
        calls += 1;
        return;
      }
      // Full: what is buffered goes now, and this call starts the next write.
      uncork();
    }
    const streams: Corkable[] = [];
    if (isCluster(redis)) {
      for (const node of redis.nodes("master")) {
        const stream = ready(node);
        if (stream !== undefined) streams.push(stream);
      }
    } else {
      const stream = ready(redis);
      if (stream !== undefined) streams.push(stream);
    }
    if (streams.length === 0) return;
    for (const stream of streams) stream.cork();
    corked = streams;
    calls = 1;
    setImmediate(uncork);
  };
}
