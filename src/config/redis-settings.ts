// Which Redis to use: one server (REDIS_URL), a Redis Cluster, or a Sentinel-managed master.

export type HostPort = { host: string; port: number };

export type RedisTopology =
  | { kind: "single"; url: string }
  | { kind: "cluster"; nodes: HostPort[] }
  | { kind: "sentinel"; sentinels: HostPort[]; master: string };

export type RedisSettings = {
  topology: RedisTopology;
  /** ACL user and password of every data node (with REDIS_URL, the URL's own credentials win). */
  username: string | undefined;
  password: string | undefined;
  /** TLS to every data node (REDIS_URL says it with rediss://) and, on Sentinel, to the Sentinels. */
  tls: boolean;
  /** The Sentinels' own password, when they require one. */
  sentinelPassword: string | undefined;
};

/** The variables this file reads: env.ts's list of every setting includes them. */
export const REDIS_SETTINGS = [
  "REDIS_URL",
  "REDIS_CLUSTER_NODES",
  "REDIS_SENTINELS",
  "REDIS_SENTINEL_MASTER",
  "REDIS_USERNAME",
  "REDIS_PASSWORD",
  "REDIS_TLS",
  "REDIS_SENTINEL_PASSWORD",
] as const;

type Read = (name: (typeof REDIS_SETTINGS)[number]) => string | undefined;

const TOPOLOGY_VARIABLES = ["REDIS_URL", "REDIS_CLUSTER_NODES", "REDIS_SENTINELS"] as const;

/** `host:port,host:port`; IPv6 hosts in brackets (`[::1]:6379`). */
function parseNodes(name: string, value: string, problems: string[]): HostPort[] {
  const nodes: HostPort[] = [];
  for (const item of value.split(",").map((s) => s.trim())) {
    const match = /^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):(\d{1,5})$/.exec(item);
    const port = Number(match?.[2]);
    if (match === null || port < 1 || port > 65535) {
      problems.push(`${name}: expected host:port[,host:port...], got "${item}"`);
      continue;
    }
    nodes.push({ host: (match[1] as string).replace(/^\[(.*)\]$/, "$1"), port });
  }
  return nodes;
}

function parseUrl(value: string, problems: string[]): string | undefined {
  let url: URL | undefined;
  try {
    url = new URL(value);
  } catch {
    url = undefined;
  }
  if (url === undefined || (url.protocol !== "redis:" && url.protocol !== "rediss:")) {
    problems.push("REDIS_URL: expected a redis:// or rediss:// URL");
    return undefined;
  }
  // The path is the database number (ioredis reads a `db` parameter too); the server may still
  // refuse a number past its `databases`, which start-up finds out (databaseRefusedProblem).
  const database = url.pathname.replace(/^\//, "");
  const parameter = url.searchParams.get("db");
  for (const [where, given] of [
    ["path", database],
    ["db parameter", parameter ?? ""],
  ] as const) {
    if (given !== "" && !/^\d{1,9}$/.test(given)) {
      problems.push(
        `REDIS_URL: the ${where} names the database, a whole number from 0 (redis://host:6379/0), got "${given}"`,
      );
      return undefined;
    }
  }
  return value;
}

/** REDIS_URL's database, which the server refused to SELECT (its reply given), as a start-up problem. */
export function databaseRefusedProblem(database: string, reply: string): string {
  if (/cluster/i.test(reply)) {
    return `REDIS_URL: names database ${database}, but this Redis runs in cluster mode, which has database 0 only (for a Redis Cluster, set REDIS_CLUSTER_NODES instead)`;
  }
  return `REDIS_URL: the server refuses database ${database} (${reply}); a Redis has databases 0 to its \`databases\` setting less one (0 to 15 by default)`;
}

/** Sentinels that answered but monitor no master of REDIS_SENTINEL_MASTER's name, as a problem. */
export function unknownSentinelMasterProblem(master: string, answered: string[]): string {
  return `REDIS_SENTINEL_MASTER: no Sentinel monitors a master named "${master}" (the Sentinels at ${answered.join(", ")} answer, but know no master of that name: see \`sentinel monitor <name> …\` in their configuration)`;
}

function parseTopology(read: Read, problems: string[]): RedisTopology | undefined {
  const given = TOPOLOGY_VARIABLES.filter((name) => read(name) !== undefined);
  if (given.length > 1) {
    problems.push(`${given.join(", ")}: set only one of them (one Redis, a Redis Cluster, or Sentinel)`);
    return undefined;
  }
  const url = read("REDIS_URL");
  if (url !== undefined) {
    const valid = parseUrl(url, problems);
    return valid === undefined ? undefined : { kind: "single", url: valid };
  }
  const clusterNodes = read("REDIS_CLUSTER_NODES");
  if (clusterNodes !== undefined) {
    return { kind: "cluster", nodes: parseNodes("REDIS_CLUSTER_NODES", clusterNodes, problems) };
  }
  const sentinels = read("REDIS_SENTINELS");
  const master = read("REDIS_SENTINEL_MASTER");
  if (sentinels === undefined) {
    if (master !== undefined) problems.push("REDIS_SENTINEL_MASTER: only used with REDIS_SENTINELS");
    return undefined;
  }
  if (master === undefined) {
    problems.push("REDIS_SENTINEL_MASTER: required with REDIS_SENTINELS (the master's name in Sentinel)");
  }
  return {
    kind: "sentinel",
    sentinels: parseNodes("REDIS_SENTINELS", sentinels, problems),
    master: master ?? "",
  };
}

/** The store's Redis, or undefined for the embedded memory store. Secrets are never echoed. */
export function parseRedisSettings(read: Read, problems: string[]): RedisSettings | undefined {
  const topology = parseTopology(read, problems);
  const tlsValue = read("REDIS_TLS")?.toLowerCase();
  if (tlsValue !== undefined && tlsValue !== "true" && tlsValue !== "false") {
    problems.push(`REDIS_TLS: expected true or false, got "${read("REDIS_TLS")}"`);
  }
  if (topology === undefined) {
    // Connection options without a Redis to apply them to are a mistake, not a memory store.
    const noRedis = !TOPOLOGY_VARIABLES.some((name) => read(name) !== undefined);
    for (const name of [
      "REDIS_USERNAME",
      "REDIS_PASSWORD",
      "REDIS_TLS",
      "REDIS_SENTINEL_PASSWORD",
    ] as const) {
      if (noRedis && read(name) !== undefined) {
        problems.push(`${name}: set REDIS_URL, REDIS_CLUSTER_NODES or REDIS_SENTINELS to use it`);
      }
    }
    return undefined;
  }
  if (topology.kind === "single" && tlsValue === "true" && !topology.url.startsWith("rediss:")) {
    problems.push("REDIS_TLS: with REDIS_URL, ask for TLS with a rediss:// URL");
  }
  if (topology.kind !== "sentinel" && read("REDIS_SENTINEL_PASSWORD") !== undefined) {
    problems.push("REDIS_SENTINEL_PASSWORD: only used with REDIS_SENTINELS");
  }
  return {
    topology,
    username: read("REDIS_USERNAME"),
    password: read("REDIS_PASSWORD"),
    tls: tlsValue === "true",
    sentinelPassword: read("REDIS_SENTINEL_PASSWORD"),
  };
}
