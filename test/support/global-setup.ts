// Global test setup: one real redis-server for the run (or REDIS_URL), a Redis Cluster and a
// Sentinel-managed master (each started once per run), and dist/ built when sources changed.
import { execFile } from "node:child_process";
import { promisify } from "node:util";
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
    // Tests that run the real processes (workers, e2e) use the compiled output. The build runs while
    // the topologies start; each of these is waited for, and a failure of any fails the run.
    const build = promisify(execFile)(process.execPath, ["scripts/ensure-built.mjs"]).catch(
      (error: Error & { stdout?: string; stderr?: string }) => {
        throw new Error(`the build failed:\n${error.stdout ?? ""}${error.stderr ?? ""}`);
      },
    );
    const given = process.env.REDIS_URL;
    // Each topology is recorded as soon as it is up, so that stop() cleans up after a partial failure.
    const started = Promise.all([
      given !== undefined && given !== "" ? undefined : startRedisServer().then((s) => (server = s)),
      startRedisCluster().then((c) => (cluster = c)),
      startRedisSentinels().then((s) => (sentinels = s)),
    ]);
    const [built, up] = await Promise.allSettled([build, started]);
    if (up.status === "rejected") throw up.reason;
    if (built.status === "rejected") throw built.reason;
    const [, shared, watched] = up.value;
    project.provide("redisUrl", server?.url ?? (given as string));
    project.provide("clusterNodes", shared.seeds);
    project.provide("sentinels", watched.addresses);
    project.provide("sentinelMaster", watched.name);
  } catch (error) {
    await stop();
    throw error;
  }
  return stop;
}
