// What start-up asks of the Redis it was given: that its user may run tollgate's scripts, and that
// it never drops keys by itself (maxmemory-policy noeviction, or no maxmemory).
import type { Redis } from "ioredis";
import type { RedisClient } from "./client.js";
import { isCluster } from "./is-cluster.js";
import { scriptsOf } from "./loader.js";

/** A data node that evicts keys once it reaches its maxmemory. */
export type EvictingNode = { node: string; policy: string; maxmemoryBytes: number };

const field = (info: string, name: string): string | undefined =>
  new RegExp(`^${name}:(\\S*)`, "m").exec(info)?.[1];

const masters = (redis: RedisClient): Redis[] => (isCluster(redis) ? redis.nodes("master") : [redis]);

/** Where the connection goes: for Sentinel, the master it was sent to, which its options do not name. */
function addressOf(node: Redis): string {
  const stream = node.stream as { remoteAddress?: string; remotePort?: number } | undefined;
  return stream?.remoteAddress === undefined
    ? `${node.options.host}:${node.options.port}`
    : `${stream.remoteAddress}:${stream.remotePort}`;
}

/**
 * The data nodes whose maxmemory-policy evicts. Any such policy drops keys whose presence a refusal
 * rests on (windows, lockouts, a subject's block, a deleted user's mark), so Redis must not choose
 * which to keep. A node that cannot be asked (no INFO in its ACL, unreachable) is left out.
 */
export async function evictingNodes(redis: RedisClient): Promise<EvictingNode[]> {
  const answers = await Promise.all(
    masters(redis).map(async (node) => {
      const info = await node.info("memory").catch(() => "");
      const policy = field(info, "maxmemory_policy");
      const maxmemoryBytes = Number(field(info, "maxmemory") ?? 0);
      // maxmemory 0: no limit, so no policy ever runs.
      if (policy === undefined || policy === "noeviction" || !(maxmemoryBytes > 0)) return undefined;
      return { node: addressOf(node), policy, maxmemoryBytes };
    }),
  );
  return answers.filter((answer) => answer !== undefined);
}

/**
 * Rejects when Redis refuses tollgate's scripts to its user (NOPERM: an ACL without FCALL, or
 * without FUNCTION LOAD while the libraries are missing): a setting, not an outage, and every check
 * would degrade until it changes. Any other failure (down, out of memory, a replica) is one the
 * checks degrade through and recover from by themselves: it resolves.
 */
export async function scriptsPermitted(redis: RedisClient, anyKey: string): Promise<void> {
  try {
    // Takes back nothing from a counter that does not exist: no effect, and no key made.
    await scriptsOf(redis).call("windowRelease", [anyKey], [0]);
  } catch (error) {
    if (String((error as Error).message).startsWith("NOPERM")) throw error;
  }
}
