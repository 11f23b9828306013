// Real Redis topologies for tests on free loopback ports: a 3-master/3-replica Cluster and a
// master + replica watched by 3 Sentinels. Each lives in a temp dir removed when it stops, and
// whatever has started is stopped when a start fails halfway or the test process ends.
import { execFile } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import { promisify } from "node:util";
import { findBinary } from "./binaries.js";
import { forget, removeOnExit } from "./leftovers.mjs";
import { freePort, redisServerArgs, waitFor } from "./ports.js";
import { startProcess } from "./processes.mjs";

const run = promisify(execFile);

export type RedisNode = {
  port: number;
  /** SIGKILL: the abrupt loss of a machine. */
  kill(): Promise<void>;
};

type Launched = RedisNode & { stop(): Promise<void>; alive(): boolean };

function launch(binary: string, args: string[], port: number, cwd: string): Launched {
  const proc = startProcess({ name: `${basename(binary)} on ${port}`, command: binary, args, cwd });
  return {
    port,
    alive: proc.alive,
    kill: async () => {
      await proc.stop("SIGKILL");
    },
    stop: async () => {
      await proc.stop("SIGTERM");
    },
  };
}

/** For waitFor: a start fails at once when one of `nodes` exits instead of coming up. */
const watching = (nodes: readonly Launched[]) => ({
  alive: () => nodes.every((node) => node.alive()),
  output: () => "",
});

/** The binaries a topology runs, found before anything starts. */
const binaries = (...names: string[]): string[] => names.map((name) => findBinary(name));

/** A temp dir of its own for a topology, removed when it stops or when this process ends. */
const topologyDir = (name: string): string => removeOnExit(mkdtempSync(join(tmpdir(), `tollgate-${name}-`)));

/** One command through redis-cli; its reply as text. */
export async function redisCli(port: number, ...args: string[]): Promise<string> {
  const { stdout } = await run(findBinary("redis-cli"), ["-h", "127.0.0.1", "-p", String(port), ...args], {
    timeout: 5_000,
  });
  return stdout.trim();
}

// A replica's first sync starts at once instead of after the default 5 s wait for more replicas.
const DATA_NODE_ARGS = ["--repl-diskless-sync-delay", "0"];

/** Whether the node on `port` is a replica whose link to its master is up (it can be promoted). */
async function replicaInSync(port: number): Promise<boolean> {
  return (await redisCli(port, "INFO", "replication")).includes("master_link_status:up");
}

/** Starts a data node into `nodes` (so that it is stopped with them should this start fail). */
async function startNode(nodes: Launched[], dir: string, args: string[] = []): Promise<Launched> {
  const port = await freePort();
  const node = launch(
    findBinary("redis-server"),
    [...redisServerArgs(port), ...DATA_NODE_ARGS, ...args],
    port,
    dir,
  );
  nodes.push(node);
  await waitFor(
    async () => (await redisCli(port, "PING")) === "PONG",
    10_000,
    `redis-server on ${port}`,
    watching([node]),
  );
  return node;
}

async function stopAll(nodes: readonly Launched[], dir: string): Promise<void> {
  await Promise.all(nodes.map((node) => node.stop()));
  rmSync(dir, { recursive: true, force: true });
  forget(dir);
}

export type RedisCluster = {
  nodes: RedisNode[];
  /** The value of REDIS_CLUSTER_NODES: every node, as seeds. */
  seeds: string;
  /** Ports of the nodes that serve slots right now. */
  masters(): Promise<number[]>;
  stop(): Promise<void>;
};

/**
 * Six nodes made into 3 masters with one replica each. A short node timeout makes a replica take
 * over about two seconds after its master dies; `cluster-require-full-coverage no` keeps the other
 * masters serving meanwhile (what docs/scaling.md recommends for production).
 */
export async function startRedisCluster(): Promise<RedisCluster> {
  const [redisCliBinary] = binaries("redis-cli", "redis-server");
  const dir = topologyDir("cluster");
  const nodes: Launched[] = [];
  try {
    for (let i = 0; i < 6; i += 1) {
      await startNode(nodes, dir, [
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        `nodes-${i}.conf`,
        // The bus port would be port + 10000, which may be taken or out of range: pick a free one.
        "--cluster-port",
        String(await freePort()),
        "--cluster-node-timeout",
        "1000",
        "--cluster-require-full-coverage",
        "no",
        "--dir",
        dir,
      ]);
    }
    const addresses = nodes.map((node) => `127.0.0.1:${node.port}`);
    await run(
      redisCliBinary as string,
      ["--cluster", "create", ...addresses, "--cluster-replicas", "1", "--cluster-yes"],
      { timeout: 30_000 },
    );
    // Ready once every node agrees and every replica has synced: a replica that never synced
    // refuses to take over (its data is "too old"), so a master killed before then stays down.
    const ready = async (): Promise<boolean> => {
      let inSync = 0;
      for (const node of nodes) {
        if (!(await redisCli(node.port, "CLUSTER", "INFO")).includes("cluster_state:ok")) return false;
        const replicas = (await redisCli(node.port, "CLUSTER", "NODES"))
          .split("\n")
          .filter((line) => /\bslave\b/.test(line));
        if (replicas.length !== 3) return false;
        if (await replicaInSync(node.port)) inSync += 1;
      }
      return inSync === 3;
    };
    await waitFor(ready, 30_000, "the Redis Cluster to agree on its slots", watching(nodes));
  } catch (error) {
    await stopAll(nodes, dir);
    throw error;
  }
  return {
    nodes,
    seeds: nodes.map((node) => `127.0.0.1:${node.port}`).join(","),
    async masters() {
      for (const node of nodes) {
        try {
          const lines = (await redisCli(node.port, "CLUSTER", "NODES")).split("\n");
          return lines
            .filter((line) => /\bmaster\b/.test(line) && !/\bfail\b/.test(line) && / \d+-\d+/.test(line))
            .map((line) => Number(/:(\d+)@/.exec(line)?.[1]));
        } catch {
          // that node is down: ask the next one
        }
      }
      throw new Error("no cluster node answers");
    },
    stop: () => stopAll(nodes, dir),
  };
}

export type RedisSentinels = {
  master: RedisNode;
  replica: RedisNode;
  sentinels: RedisNode[];
  /** The value of REDIS_SENTINELS. */
  addresses: string;
  /** The value of REDIS_SENTINEL_MASTER. */
  name: string;
  /**
   * The master's port as each answering Sentinel names it. The Sentinel that led a failover knows
   * first; the others learn it from its hello messages, sent every 2 s.
   */
  masterPorts(): Promise<number[]>;
  stop(): Promise<void>;
};

export const SENTINEL_MASTER_NAME = "tollgate";

/** A master, its replica and 3 Sentinels (quorum 2) that fail over one second after the master goes. */
export async function startRedisSentinels(): Promise<RedisSentinels> {
  const [sentinelBinary] = binaries("redis-sentinel", "redis-server", "redis-cli");
  const dir = topologyDir("sentinel");
  const nodes: Launched[] = [];
  try {
    const master = await startNode(nodes, dir);
    const replica = await startNode(nodes, dir, ["--replicaof", "127.0.0.1", String(master.port)]);
    const sentinels: Launched[] = [];
    for (let i = 0; i < 3; i += 1) {
      const port = await freePort();
      const file = join(dir, `sentinel-${i}.conf`);
      // Sentinel rewrites its own file as it learns the topology, so each gets a writable copy.
      writeFileSync(
        file,
        [
          `port ${port}`,
          "bind 127.0.0.1",
          `dir ${dir}`,
          `sentinel monitor ${SENTINEL_MASTER_NAME} 127.0.0.1 ${master.port} 2`,
          `sentinel down-after-milliseconds ${SENTINEL_MASTER_NAME} 1000`,
          `sentinel failover-timeout ${SENTINEL_MASTER_NAME} 5000`,
          `sentinel parallel-syncs ${SENTINEL_MASTER_NAME} 1`,
          "",
        ].join("\n"),
      );
      const sentinel = launch(sentinelBinary as string, [file], port, dir);
      nodes.push(sentinel);
      sentinels.push(sentinel);
    }
    // Ready once every Sentinel knows the replica and the two other Sentinels: only then can they
    // agree on a failover.
    const ready = async (): Promise<boolean> => {
      for (const sentinel of sentinels) {
        const info = (await redisCli(sentinel.port, "SENTINEL", "MASTER", SENTINEL_MASTER_NAME)).split("\n");
        const field = (name: string): string | undefined => info[info.indexOf(name) + 1];
        if (field("num-slaves") !== "1" || field("num-other-sentinels") !== "2") return false;
      }
      return replicaInSync(replica.port);
    };
    await waitFor(ready, 30_000, "the Sentinels to discover the replica and each other", watching(nodes));
    return {
      master,
      replica,
      sentinels,
      addresses: sentinels.map((s) => `127.0.0.1:${s.port}`).join(","),
      name: SENTINEL_MASTER_NAME,
      async masterPorts() {
        const ports: number[] = [];
        for (const sentinel of sentinels) {
          try {
            const reply = await redisCli(
              sentinel.port,
              "SENTINEL",
              "GET-MASTER-ADDR-BY-NAME",
              SENTINEL_MASTER_NAME,
            );
            const port = Number(reply.split("\n")[1]);
            // A Sentinel that names no master yet (an empty answer) names no new one either.
            if (Number.isInteger(port) && port > 0) ports.push(port);
          } catch {
            // a Sentinel that does not answer (the others do)
          }
        }
        if (ports.length === 0) throw new Error("no Sentinel answers");
        return ports;
      },
      stop: () => stopAll(nodes, dir),
    };
  } catch (error) {
    await stopAll(nodes, dir);
    throw error;
  }
}
