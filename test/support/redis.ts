// Per-file Redis clients with the tollgate scripts loaded and a key prefix of their own.
import { randomBytes } from "node:crypto";
import type { Redis } from "ioredis";
import { inject } from "vitest";
import { parseRedisSettings } from "../../src/config/redis-settings.js";
import { createRedisClient, type RedisClient } from "../../src/store/redis/client.js";
import type { Store } from "../../src/store/store.js";

export function testPrefix(): string {
  return `test:${randomBytes(4).toString("hex")}:`;
}

export function redisUrl(): string {
  return inject("redisUrl");
}

export function connectRedis(url = redisUrl()): Redis {
  return createRedisClient({ url, commandTimeoutMs: 5000, offlineQueue: true });
}

/** The settings of the shared Redis Cluster or Sentinel setup, as tollgate reads them from its env. */
export function topologyEnv(kind: "cluster" | "sentinel"): Record<string, string> {
  return kind === "cluster"
    ? { REDIS_CLUSTER_NODES: inject("clusterNodes") }
    : { REDIS_SENTINELS: inject("sentinels"), REDIS_SENTINEL_MASTER: inject("sentinelMaster") };
}

/** A client of the shared Cluster or Sentinel setup, configured exactly as tollgate configures its own. */
export function connectTopology(kind: "cluster" | "sentinel", env = topologyEnv(kind)): RedisClient {
  const problems: string[] = [];
  const settings = parseRedisSettings((name) => env[name], problems);
  if (settings === undefined || problems.length > 0) throw new Error(problems.join("; "));
  return createRedisClient({ settings, commandTimeoutMs: 5000, offlineQueue: true });
}

/** A new free user with one session in `store`, as a login leaves them: what an authorize call takes. */
export async function userWithSession(store: Store, username: string) {
  const user = await store.users.create({ username, tier: "free", passwordHash: "h" });
  if (user === "exists") throw new Error(`${username} exists`);
  const created = await store.sessions.create(
    { userId: user.id, deviceName: "d", ip: "198.51.100.1", userAgent: "u", passwordHash: "h" },
    { idleMs: 60_000, maxAgeMs: 600_000, maxPerUser: 5 },
  );
  if (created === "refused") throw new Error(`a session of ${username} was refused`);
  return { userId: user.id, sessionId: created.session.sessionId };
}

/**
 * The store's own upkeep, which MONITOR shows between the commands a test counts: the connection
 * watchdog's PING and the invalidations' heartbeat (peerBeat-2.lua, and what it runs: the listing
 * of the instances, a PUBLISH to the process's `…:alive:` channel).
 */
export function isWatchdogTraffic(args: readonly string[]): boolean {
  const command = String(args[0]).toLowerCase();
  return (
    (command === "ping" && args.length === 1) ||
    (command === "publish" && /:alive:/.test(String(args[1]))) ||
    (command === "fcall" && String(args[1]).startsWith("tollgate_peerBeat_")) ||
    (command !== "fcall" && String(args[1]).includes("{invalidations}:peers"))
  );
}
