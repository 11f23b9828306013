// Global test setup: one real redis-server for the run (or REDIS_URL), a Redis Cluster and a
// Sentinel-managed master (each started once per run), and dist/ built when sources changed. Every
// server it starts is stopped, and the run's temp folder removed, however the run ends.
import { execFile } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import type { TestProject } from "vitest/node";
import { requireBinaries } from "./binaries.js";
import { removeOnExit } from "./leftovers.mjs";
import { type RedisServer, startRedisServer } from "./processes.mjs";
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

/** Every server the suites run, whether the global setup or a test starts it. */
const BINARIES = ["redis-server", "redis-cli", "redis-sentinel", "nginx", "prometheus", "promtool"];

/**
 * One folder for everything the run writes to the temp dir: TMPDIR points into it for the workers
 * and every process they start, so that whatever a test leaves there goes when the run ends.
 */
function runFolder(): string {
  const folder = removeOnExit(mkdtempSync(join(tmpdir(), "tollgate-test-")));
  process.env.TMPDIR = folder;
  return folder;
}

/**
 * Waits for every start, failed or not, so that none is still coming up (and unrecorded) when the
 * others are stopped; then fails with the first failure.
 */
async function startAll(starts: readonly (Promise<unknown> | undefined)[]): Promise<void> {
  const settled = await Promise.allSettled(starts);
  const failed = settled.find((s): s is PromiseRejectedResult => s.status === "rejected");
  if (failed !== undefined) throw failed.reason;
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  // A missing server fails the run at once with one message, before anything starts.
  requireBinaries(BINARIES);
  const folder = runFolder();
  // vitest's own folder of transformed modules, which it removes when it closes, but not when stopped.
  removeOnExit(project.tmpDir);
  let server: RedisServer | undefined;
  let cluster: RedisCluster | undefined;
  let sentinels: RedisSentinels | undefined;
  const stop = async (): Promise<void> => {
    await Promise.all([server?.stop(), cluster?.stop(), sentinels?.stop()]);
    rmSync(folder, { recursive: true, force: true });
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
    await startAll([
      build,
      given !== undefined && given !== "" ? undefined : startRedisServer().then((s) => (server = s)),
      startRedisCluster().then((c) => (cluster = c)),
      startRedisSentinels().then((s) => (sentinels = s)),
    ]);
    project.provide("redisUrl", server?.url ?? (given as string));
    project.provide("clusterNodes", (cluster as RedisCluster).seeds);
    project.provide("sentinels", (sentinels as RedisSentinels).addresses);
    project.provide("sentinelMaster", (sentinels as RedisSentinels).name);
  } catch (error) {
    await stop();
    throw error;
  }
  return stop;
}
