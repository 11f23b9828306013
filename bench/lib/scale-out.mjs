// The scale-out rows: the allowed check on two tollgate processes sharing one Redis, and on one and
// two processes sharing a Redis Cluster of 3 masters and 3 replicas, beside the single-Redis row.
import { execFile } from "node:child_process";
import { join } from "node:path";
import { promisify } from "node:util";
import { login } from "../../test/support/http-client.mjs";
import { findBinary, freePort, portOpen, redisServerArgs, waitFor } from "../../test/support/local.mjs";
import { startProcess } from "../../test/support/processes.mjs";
import { benchTollgate } from "./services.mjs";

const run = promisify(execFile);
const cli = (port, ...args) =>
  run(findBinary("redis-cli"), ["-h", "127.0.0.1", "-p", String(port), ...args], { timeout: 5_000 }).then(
    ({ stdout }) => stdout,
  );

/** Six redis-server nodes joined into 3 masters with one replica each; REDIS_CLUSTER_NODES for them. */
export async function startCluster(dir) {
  const ports = [];
  for (let i = 0; i < 6; i += 1) {
    const port = await freePort();
    const proc = startProcess({
      name: "redis cluster node",
      command: findBinary("redis-server"),
      args: [
        ...redisServerArgs(port),
        "--cluster-enabled",
        "yes",
        // Replicas write the RDB they sync from into --dir: the bench's temp dir, not the checkout.
        "--dir",
        dir,
        "--cluster-config-file",
        `cluster-nodes-${i}.conf`,
        "--cluster-port",
        String(await freePort()),
      ],
    });
    await waitFor(() => portOpen(port), 10_000, `redis cluster node on ${port}`, proc);
    ports.push(port);
  }
  const seeds = ports.map((port) => `127.0.0.1:${port}`);
  await run(
    findBinary("redis-cli"),
    ["--cluster", "create", ...seeds, "--cluster-replicas", "1", "--cluster-yes"],
    {
      timeout: 30_000,
    },
  );
  const agreed = async () => {
    for (const port of ports)
      if (!(await cli(port, "CLUSTER", "INFO")).includes("cluster_state:ok")) return false;
    return true;
  };
  await waitFor(agreed, 30_000, "the Redis Cluster to agree on its slots");
  return { nodes: seeds.join(",") };
}

/**
 * A second tollgate on the core's Redis, the cluster, and two tollgates on it; bob_pro logged in on
 * each store. The rows' ratio is to the single-Redis allowed row, measured in the same run.
 */
export async function scaleOutRows({ core, dir, options }) {
  const policyFile = join(dir, "policy.yaml");
  const common = { policyFile, main: options.tollgateMain };
  const second = await benchTollgate({ ...common, redisUrl: core.redis.url, name: "tollgate (2nd)" });
  const cluster = await startCluster(dir);
  const redisEnv = { REDIS_CLUSTER_NODES: cluster.nodes };
  const onCluster = [
    await benchTollgate({ ...common, redisEnv, name: "tollgate (cluster 1)" }),
    await benchTollgate({ ...common, redisEnv, name: "tollgate (cluster 2)" }),
  ];
  const bobOnCluster = await login(onCluster[0].url, "bob_pro");
  const checkUrl = (tollgate) => `${tollgate.checkUrl}/ext_authz/api/products`;
  const allowed = (session) => ({ authorization: `Bearer ${session.access_token}` });
  const row = { tollgate: true, ceiling: "allowed", expected: 200 };
  return [
    {
      ...row,
      id: "allowed-2p",
      short: "2 processes, 1 Redis",
      label: "tollgate check, allowed, load split over two tollgate processes sharing one Redis → 200",
      url: checkUrl(core.tollgate),
      urls: [checkUrl(core.tollgate), checkUrl(second)],
      tollgates: [core.tollgate, second],
      headers: allowed(core.bob),
      servers: ["tollgate", "tollgate (2nd)"],
    },
    {
      ...row,
      id: "cluster-1p",
      short: "1 process, cluster",
      label: "tollgate check, allowed, one tollgate on a Redis Cluster (3 masters + 3 replicas) → 200",
      url: checkUrl(onCluster[0]),
      tollgates: [onCluster[0]],
      headers: allowed(bobOnCluster),
      servers: ["tollgate (cluster 1)"],
    },
    {
      ...row,
      id: "cluster-2p",
      short: "2 processes, cluster",
      label: "tollgate check, allowed, load split over two tollgate processes on the Redis Cluster → 200",
      url: checkUrl(onCluster[0]),
      urls: onCluster.map(checkUrl),
      tollgates: onCluster,
      headers: allowed(bobOnCluster),
      servers: ["tollgate (cluster 1)", "tollgate (cluster 2)"],
    },
  ];
}
