// Global test setup: one real redis-server for the run (or REDIS_URL), a Redis Cluster and a
// Sentinel-managed master (each started once per run), and a fresh build in dist/.
import { execFileSync } from "node:child_process";
import type { TestProject } from "vitest/node";
import { type RedisServer, startRedisServer } from "./redis-server.js";
import {
  type RedisCluster,
  type RedisSentinels,
  startRedisCluster,
  startRedisSentinels,
} from "./redis-topologies.js";

declare module "vitest" {
  export interface ProvidedContext {
    redisUrl: string;
    /** REDIS_CLUSTER_NODES of the shared cluster. */
    clusterNodes: string;
    /** REDIS_SENTINELS and REDIS_SENTINEL_MASTER of the shared Sentinel setup. */
    sentinels: string;
    sentinelMaster: string;
  }
}

let server: RedisServer | undefined;
let cluster: RedisCluster | undefined;
let sentinels: RedisSentinels | undefined;

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const stop = async (): Promise<void> => {
    await Promise.all([server?.stop(), cluster?.stop(), sentinels?.stop()]);
  };
  try {
    // Tests that run the real processes (workers, e2e) use the compiled output.
    execFileSync("npm", ["run", "--silent", "build"], { stdio: "inherit" });
    const given = process.env.REDIS_URL;
    const single = given !== undefined && given !== "" ? undefined : startRedisServer();
    [server, cluster, sentinels] = await Promise.all([single, startRedisCluster(), startRedisSentinels()]);
    project.provide("redisUrl", server?.url ?? (given as string));
    project.provide("clusterNodes", cluster.seeds);
    project.provide("sentinels", sentinels.addresses);
    project.provide("sentinelMaster", sentinels.name);
  } catch (error) {
    await stop();
    throw error;
  }
  return stop;
}
