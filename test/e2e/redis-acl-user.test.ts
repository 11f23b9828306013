// The ACL user docs/failure-modes.md gives is enough on a Cluster too: tollgate made with it gets
// ready, and Redis refuses none of its commands (the client's topology discovery included).
import { readFileSync } from "node:fs";
import type { Cluster } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTollgate } from "../support/processes.mjs";
import { connectTopology, testPrefix, topologyEnv } from "../support/redis.js";

const DOC = readFileSync(new URL("../../docs/failure-modes.md", import.meta.url), "utf8");
const USER = `tg-acl-${process.pid}`;
const PASSWORD = "tg-acl-password-1";

/** The documented rules for the default prefix `tg:`, with `prefix` in its place. */
function documentedRules(prefix: string): string[] {
  const line = /^ACL SETUSER tollgate on >… (.*)$/m.exec(DOC)?.[1] ?? "";
  // The Cluster's additions, as the paragraph after the block names them.
  const cluster = /On a Cluster give it every node, with `([^`]+)` added/.exec(DOC)?.[1] ?? "";
  return `${line} ${cluster}`
    .split(/\s+/)
    .filter((rule) => rule !== "")
    .map((rule) => rule.replace("tg:", prefix));
}

/** An ACL LOG entry's fields ([name, value, name, value, …]). */
function fieldsOf(entry: unknown[]): Record<string, unknown> {
  const fields: Record<string, unknown> = {};
  for (let i = 0; i + 1 < entry.length; i += 2) fields[String(entry[i])] = entry[i + 1];
  return fields;
}

let cluster: Cluster;
beforeAll(async () => {
  cluster = connectTopology("cluster") as Cluster;
  await cluster.ping();
});
afterAll(async () => {
  await Promise.all(cluster.nodes("all").map((node) => node.acl("DELUSER", USER).catch(() => 0)));
  cluster.disconnect();
});

describe("the documented ACL user, on a Cluster", () => {
  it("runs tollgate: ready, the admin API answers, and no node refuses a command", async () => {
    const prefix = testPrefix();
    const rules = documentedRules(prefix);
    expect(rules).toContain("+fcall");
    const nodes = cluster.nodes("all");
    await Promise.all(
      nodes.map(async (node) => {
        await node.acl("SETUSER", USER, "reset", "on", `>${PASSWORD}`, ...rules);
        await node.acl("LOG", "RESET");
      }),
    );
    const tollgate = await startTollgate(
      {
        ...topologyEnv("cluster"),
        REDIS_USERNAME: USER,
        REDIS_PASSWORD: PASSWORD,
        REDIS_KEY_PREFIX: prefix,
      },
      { name: "tollgate-acl-cluster", waitForDemoUsers: true },
    );
    try {
      // Long enough for the invalidations' heartbeats, sent once a second.
      await new Promise((r) => setTimeout(r, 2_500));
      const logs = await Promise.all(nodes.map((node) => node.acl("LOG") as Promise<unknown[][]>));
      const refused = logs
        .flat()
        .map(fieldsOf)
        .filter((entry) => entry.username === USER);
      expect(refused.map((entry) => entry.object)).toEqual([]);
    } finally {
      await tollgate.stop();
    }
  });
});
