// A bound on what the limiter leaves unanswered on its connections: past it, calls fail at once.
import type { Redis } from "ioredis";
import type { LimiterPort } from "../../ratelimit/limiter.js";
import type { RedisClient } from "./client.js";
import { isCluster } from "./is-cluster.js";

/**
 * The most commands the client's connections may carry unanswered before limiter calls fail
 * without being sent. Far above any healthy load (at 10,000 calls a second, a second of Redis's
 * work, ten times a check's default deadline), and a few tens of MB of tollgate's memory.
 */
export const MAX_BACKLOG = 10_000;

/** Commands sent and not answered yet, over every connection of the client (a Cluster's masters). */
function backlogOf(redis: RedisClient): number {
  if (!isCluster(redis)) return (redis as Redis).commandQueue.length;
  let sum = 0;
  for (const node of redis.nodes("master")) sum += node.commandQueue.length;
  return sum;
}

export class BacklogFullError extends Error {
  constructor(max: number) {
    super(`Redis leaves ${max} commands unanswered: not sending more until it answers`);
    this.name = "BacklogFullError";
  }
}

/**
 * The limiter with its calls refused at once while Redis leaves `max` commands unanswered. A Redis
 * that stops reading without closing (a frozen host, SIGSTOP, a long busy spell) keeps the
 * connection open, and the watchdog keeps it on purpose (its commands run once when Redis resumes):
 * without a bound, every check meanwhile queues another command, and its memory, until the process
 * runs out. Checks past the bound degrade as when Redis is down.
 */
export function withBacklogBound(redis: RedisClient, port: LimiterPort, max = MAX_BACKLOG): LimiterPort {
  return {
    ...port,
    limit: (request) =>
      backlogOf(redis) >= max ? Promise.reject(new BacklogFullError(max)) : port.limit(request),
  };
}
