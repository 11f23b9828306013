// The Redis connection: fail-fast options for the check path and the Lua scripts as commands.
import { createRequire } from "node:module";
import type * as IORedis from "ioredis";
import type { Cluster, ClusterOptions, Redis, RedisOptions } from "ioredis";
import type { HostPort, RedisSettings } from "../../config/redis-settings.js";
import { failLostCommands } from "./lost-commands.js";
import { watchRefusals } from "./refusals.js";
import { followSwitchMaster } from "./switch-master.js";

let ioredisModule: typeof IORedis | undefined;

/**
 * ioredis, loaded when the first client is made: a tollgate on the in-memory store never reads it,
 * which is about a fifth of its start-up time.
 */
function ioredis(): typeof IORedis {
  ioredisModule ??= createRequire(import.meta.url)("ioredis") as typeof IORedis;
  return ioredisModule;
}

/** One Redis, a Redis Cluster or a Sentinel-managed master: the store's code is the same for all. */
export type RedisClient = Redis | Cluster;

export type RedisClientOptions = ({ url: string } | { settings: RedisSettings }) & {
  connectTimeoutMs?: number;
  /** A backstop for every command; callers put their own, shorter deadlines on calls that need one. */
  commandTimeoutMs?: number;
  /** When false, commands fail at once while disconnected instead of waiting in a queue. */
  offlineQueue?: boolean;
  /** A Cluster's nodes where they are reached, when not at the addresses they announce (a test's proxies). */
  natMap?: ClusterOptions["natMap"];
};

type Common = Pick<RedisOptions, "commandTimeout" | "maxRetriesPerRequest" | "connectTimeout">;

/** Reconnection backs off from 100 ms to at most 1 s, so service resumes within a second of a return. */
const backoff = (attempt: number): number => Math.min(50 * 2 ** Math.min(attempt, 5), 1000);

function credentials(settings: RedisSettings): Pick<RedisOptions, "username" | "password" | "tls"> {
  return {
    ...(settings.username === undefined ? {} : { username: settings.username }),
    ...(settings.password === undefined ? {} : { password: settings.password }),
    ...(settings.tls ? { tls: {} } : {}),
  };
}

/**
 * A Redis Cluster client. A command for a slot whose master is unreachable is retried every
 * `retryDelayOnFailover` with a fresh slot map, so it reaches the promoted replica once the cluster
 * fails over; callers' deadlines (REDIS_TIMEOUT_MS on checks) bound how long anyone waits meanwhile.
 * A command a lost connection had written is not (failLostCommands).
 */
function createCluster(
  nodes: HostPort[],
  settings: RedisSettings,
  common: Common,
  options: Pick<RedisClientOptions, "natMap"> & { offlineQueue: boolean },
) {
  const cluster = new (ioredis().Cluster)(nodes, {
    enableOfflineQueue: options.offlineQueue,
    ...(options.natMap === undefined ? {} : { natMap: options.natMap }),
    scaleReads: "master",
    retryDelayOnFailover: 100,
    retryDelayOnClusterDown: 100,
    retryDelayOnTryAgain: 100,
    // Up to ~2 s of retries per command: past any check's deadline, short of piling up for long.
    maxRedirections: 20,
    slotsRefreshTimeout: common.connectTimeout ?? 1_000,
    slotsRefreshInterval: 2_000,
    clusterRetryStrategy: backoff,
    redisOptions: { ...common, ...credentials(settings) },
  });
  // As maxRetriesPerRequest below: only the tests' helpers (an offline queue) have them sent again.
  if (!options.offlineQueue) failLostCommands(cluster);
  return cluster;
}

function createSentinelClient(
  topology: Extract<RedisSettings["topology"], { kind: "sentinel" }>,
  settings: RedisSettings,
  common: Common,
  offlineQueue: boolean,
): Redis {
  const sentinelPassword =
    settings.sentinelPassword === undefined ? {} : { password: settings.sentinelPassword };
  const client = new (ioredis().Redis)({
    ...common,
    ...credentials(settings),
    sentinels: topology.sentinels,
    name: topology.master,
    role: "master",
    ...(settings.sentinelPassword === undefined ? {} : { sentinelPassword: settings.sentinelPassword }),
    enableTLSForSentinelMode: settings.tls,
    // followSwitchMaster below instead: ioredis's detector also drops a connection already on the
    // master that a Sentinel announces.
    failoverDetector: false,
    enableOfflineQueue: offlineQueue,
    retryStrategy: backoff,
    sentinelRetryStrategy: backoff,
  });
  // Reconnect as soon as a Sentinel announces another master, not on the next failed command. The
  // Sentinels are reached as ioredis reaches them to find the master: plain TCP, their own password.
  const follower = followSwitchMaster(client, {
    sentinels: topology.sentinels,
    name: topology.master,
    connectTo: (sentinel) =>
      new (ioredis().Redis)({
        ...sentinel,
        ...sentinelPassword,
        connectTimeout: common.connectTimeout,
        enableReadyCheck: false,
        // followSwitchMaster subscribes on each connection itself, after asking for the other Sentinels.
        autoResubscribe: false,
        enableOfflineQueue: false,
        retryStrategy: backoff,
      }),
  });
  client.once("end", () => follower.close());
  return client;
}

export function createRedisClient(options: RedisClientOptions & { url: string }): Redis;
export function createRedisClient(options: RedisClientOptions): RedisClient;
export function createRedisClient(options: RedisClientOptions): RedisClient {
  // While disconnected, commands fail at once instead of piling up behind the outage.
  const offlineQueue = options.offlineQueue ?? false;
  const common: Common = {
    commandTimeout: options.commandTimeoutMs ?? 10_000,
    // 0: the commands a lost connection carried fail with it. ioredis would otherwise send them
    // again on the next connection, where whatever the old one had delivered runs a second time (a
    // path dark one way, dropped by the watchdog), and the rest runs seconds after its caller gave
    // up. Only a client with an offline queue (the tests' helpers) lets its commands wait through
    // a reconnection.
    maxRetriesPerRequest: offlineQueue ? 1 : 0,
    connectTimeout: options.connectTimeoutMs ?? 1_000,
  };
  const settings: RedisSettings =
    "url" in options
      ? {
          topology: { kind: "single", url: options.url },
          username: undefined,
          password: undefined,
          tls: false,
          sentinelPassword: undefined,
        }
      : options.settings;
  const { topology } = settings;
  let client: RedisClient;
  if (topology.kind === "cluster")
    client = createCluster(topology.nodes, settings, common, { offlineQueue, natMap: options.natMap });
  else if (topology.kind === "sentinel")
    client = createSentinelClient(topology, settings, common, offlineQueue);
  else {
    // The URL's own credentials and TLS (rediss://) come first; the settings fill in what it lacks.
    client = new (ioredis().Redis)(topology.url, {
      ...common,
      ...credentials(settings),
      enableOfflineQueue: offlineQueue,
      retryStrategy: backoff,
      lazyConnect: false,
    });
  }
  watchRefusals(client, topology);
  return client;
}
