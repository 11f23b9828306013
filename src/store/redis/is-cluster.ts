// Whether a client is a Redis Cluster client (commands routed per slot) or one connection.
import type { Cluster, Redis } from "ioredis";

export const isCluster = (redis: Redis | Cluster): redis is Cluster =>
  "isCluster" in redis && redis.isCluster === true;
