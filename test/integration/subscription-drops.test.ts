// An invalidations subscription whose connection Redis closes (CLIENT KILL, a pub/sub client past
// its output buffer limit, a node restarted) must be seen to drop: announcements sent before it is
// subscribed again are lost, so whatever the instance cached before must go. On one Redis and on a
// Redis Cluster, where the subscription is not the Cluster client's own (ioredis replaces that one
// without a word, announcements lost meanwhile).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createDenialCache, type Refusal } from "../../src/check/denial-cache.js";
import { parseRedisSettings } from "../../src/config/redis-settings.js";
import { createRedisClient, type RedisClient } from "../../src/store/redis/client.js";
import { createRedisInvalidations } from "../../src/store/redis/invalidations.js";
import { startRedisServer } from "../support/processes.mjs";
import { redisUrl } from "../support/redis.js";
import { type RedisCluster, redisCli, startRedisCluster } from "../support/redis-topologies.js";

const HEARTBEAT = { intervalMs: 100, silenceMs: 600 };
/** A user's full search window, as the store would have described it, refused for a minute. */
const REFUSAL: Refusal = {
  hit: {
    allowed: false,
    layer: 0,
    window: 0,
    limit: 3,
    windowMs: 60_000,
    used: 3,
    remaining: 0,
    resetAtMs: Date.now() + 60_000,
    retryAfterMs: 60_000,
  },
  user: { tier: "free", ownRule: undefined },
};
const TIMES = { retryAtMs: Date.now() + 60_000, untilMs: Date.now() + 60_000 };

async function eventually(probe: () => boolean | Promise<boolean>, ms: number): Promise<boolean> {
  const until = Date.now() + ms;
  for (;;) {
    if (await probe()) return true;
    if (Date.now() > until) return false;
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** Where a case runs: a Redis or a Cluster of its own (see the describe's beforeAll). */
type Servers = { url: string; ports: number[] } | { seeds: string; ports: number[] };

/** A client made as tollgate makes its own (no offline queue). */
function tollgateClient(servers: Servers): RedisClient {
  if ("url" in servers) return createRedisClient({ url: servers.url });
  const env: Record<string, string> = { REDIS_CLUSTER_NODES: servers.seeds };
  const problems: string[] = [];
  const settings = parseRedisSettings((name) => env[name], problems);
  if (settings === undefined) throw new Error(problems.join("; "));
  return createRedisClient({ settings });
}

/** Every pub/sub client of every server, as "<port> <id>". */
async function pubsubClients(servers: Servers): Promise<Set<string>> {
  const found = new Set<string>();
  for (const port of servers.ports) {
    for (const line of (await redisCli(port, "CLIENT", "LIST", "TYPE", "pubsub")).split("\n")) {
      const id = /^id=(\d+)/.exec(line)?.[1];
      if (id !== undefined) found.add(`${port} ${id}`);
    }
  }
  return found;
}

describe.each(["single", "cluster"] as const)(
  "an invalidations subscription closed by Redis (%s)",
  (kind) => {
    const clients: RedisClient[] = [];
    let servers: Servers;
    let single: Awaited<ReturnType<typeof startRedisServer>> | undefined;
    let cluster: RedisCluster | undefined;
    // Servers of its own: on the shared ones, other files' tollgates subscribe at the same time, and
    // a connection of theirs would be taken for this one's (seen in CI: two new pub/sub clients).
    beforeAll(async () => {
      if (kind === "single") {
        single = await startRedisServer();
        servers = { url: single.url, ports: [single.port] };
      } else {
        cluster = await startRedisCluster();
        servers = { seeds: cluster.seeds, ports: cluster.nodes.map((node) => node.port) };
      }
    }, 60_000);
    afterAll(async () => {
      for (const client of clients) client.disconnect();
      await single?.stop();
      await cluster?.stop();
    });

    it("is distrusted from the drop, so an announcement lost before it subscribes again leaves nothing cached", async () => {
      const channel = `test-drop-${Math.random().toString(36).slice(2)}`;
      const peersKey = `{${channel}}:peers`;
      const receiverClient = tollgateClient(servers);
      clients.push(receiverClient);
      const before = await pubsubClients(servers);
      const receiver = createRedisInvalidations({
        redis: receiverClient,
        channel,
        peersKey,
        heartbeat: HEARTBEAT,
      });
      const health: boolean[] = [];
      const heard: string[] = [];
      // As app.ts wires the denial cache.
      const denials = createDenialCache();
      receiver.subscribe({
        message: (subject) => {
          heard.push(subject);
          denials.invalidate(subject);
        },
        health: (on) => {
          health.push(on);
          denials.setEnabled(on);
        },
      });
      try {
        expect(await eventually(() => health.at(-1) === true, 10_000)).toBe(true);
        const own = [...(await pubsubClients(servers))].filter((c) => !before.has(c));
        expect(own).toHaveLength(1);
        const [port, id] = (own[0] as string).split(" ");
        denials.remember("u:lost", "search", 60_000, undefined, REFUSAL, TIMES, denials.generation());
        expect(denials.lookup("u:lost", "search", undefined, Date.now())).toBeDefined();
        const trustedUntilNow = health.length;
        // The subscription closed, then an announcement before any reconnection can subscribe again:
        // both in one transaction, so the announcement is surely lost.
        const node = createRedisClient({ url: `redis://127.0.0.1:${port}`, offlineQueue: true });
        clients.push(node);
        const replies = await node
          .multi()
          .client("KILL", "ID", id as string)
          .publish(channel, "u:lost")
          .exec();
        expect(replies?.map(([error]) => error)).toEqual([null, null]);
        // Trusted again once subscribed again, on a connection that hears what comes next...
        expect(await eventually(() => health.length > trustedUntilNow && health.at(-1) === true, 5_000)).toBe(
          true,
        );
        await node.publish(channel, "u:after");
        expect(await eventually(() => heard.includes("u:after"), 2_000)).toBe(true);
        expect(heard).not.toContain("u:lost");
        // ...but the refusal cached before the lost announcement went with the old connection.
        expect(health.slice(trustedUntilNow)).toEqual([false, true]);
        expect(denials.lookup("u:lost", "search", undefined, Date.now())).toBeUndefined();
      } finally {
        await receiver.close();
      }
    });
  },
);

describe("an invalidations subscription on a Cluster master that dies", () => {
  let cluster: RedisCluster | undefined;
  afterAll(async () => {
    await cluster?.stop();
  });

  it("moves to another master, and is trusted again only there", async () => {
    // A Cluster of its own: the shared one must keep its masters.
    cluster = await startRedisCluster();
    const env: Record<string, string> = { REDIS_CLUSTER_NODES: cluster.seeds };
    const problems: string[] = [];
    const settings = parseRedisSettings((name) => env[name], problems);
    if (settings === undefined) throw new Error(problems.join("; "));
    const receiverClient = createRedisClient({ settings });
    const sender = createRedisClient({ settings, offlineQueue: true });
    const channel = `test-moved-${Math.random().toString(36).slice(2)}`;
    const receiver = createRedisInvalidations({
      redis: receiverClient,
      channel,
      peersKey: `{${channel}}:peers`,
      heartbeat: HEARTBEAT,
    });
    const health: boolean[] = [];
    const heard: string[] = [];
    receiver.subscribe({ message: (s) => heard.push(s), health: (h) => health.push(h) });
    try {
      expect(await eventually(() => health.at(-1) === true, 10_000)).toBe(true);
      const ports = [];
      for (const node of cluster.nodes) {
        if ((await redisCli(node.port, "CLIENT", "LIST", "TYPE", "pubsub")).includes("id=")) ports.push(node);
      }
      expect(ports).toHaveLength(1);
      const trusted = health.length;
      await ports[0]?.kill();
      // Off at once, then on again once subscribed elsewhere and hearing its heartbeat there.
      expect(await eventually(() => health.length > trusted + 1 && health.at(-1) === true, 20_000)).toBe(
        true,
      );
      expect(health.slice(trusted, trusted + 1)).toEqual([false]);
      await sender.publish(channel, "u:after");
      expect(await eventually(() => heard.includes("u:after"), 5_000)).toBe(true);
    } finally {
      await receiver.close();
      receiverClient.disconnect();
      sender.disconnect();
    }
  }, 60_000);
});

describe("an announcement that a subscription still up never hears", () => {
  it("empties the cache at the next message, as a Cluster bus link dropped with the message in it needs", async () => {
    const channel = `test-missed-${Math.random().toString(36).slice(2)}`;
    const peersKey = `{${channel}}:peers`;
    const sender = createRedisClient({ url: redisUrl(), offlineQueue: true });
    const receiverClient = tollgateClient({ url: redisUrl(), ports: [] });
    const receiver = createRedisInvalidations({
      redis: receiverClient,
      channel,
      peersKey,
      heartbeat: HEARTBEAT,
    });
    const senderBus = createRedisInvalidations({ redis: sender, channel, peersKey, heartbeat: HEARTBEAT });
    const health: boolean[] = [];
    const denials = createDenialCache();
    receiver.subscribe({
      message: (subject) => denials.invalidate(subject),
      health: (on) => {
        health.push(on);
        denials.setEnabled(on);
      },
    });
    senderBus.subscribe({ message: () => undefined, health: () => undefined });
    const cached = () => denials.lookup("u:1", "search", undefined, Date.now()) !== undefined;
    try {
      expect(await eventually(() => health.at(-1) === true, 10_000)).toBe(true);
      // Heard: an announcement of another subject leaves u:1's refusal alone.
      denials.remember("u:1", "search", 60_000, undefined, REFUSAL, TIMES, denials.generation());
      await senderBus.publish("u:2");
      expect(cached()).toBe(true);
      // Sent, and counted, but never delivered here: Redis has no record of that but the count.
      await sender.incr(`${peersKey}:count`);
      // The next heartbeat shows a count past the last heard: u:1's refusal may predate a change.
      expect(await eventually(() => !cached(), 2_000)).toBe(true);
      expect(health.at(-1)).toBe(true);
      // Caching again from there on, and a lost one found out by the next announcement too.
      denials.remember("u:1", "search", 60_000, undefined, REFUSAL, TIMES, denials.generation());
      expect(cached()).toBe(true);
      await sender.incr(`${peersKey}:count`);
      await senderBus.publish("u:3");
      expect(cached()).toBe(false);
    } finally {
      await Promise.all([receiver.close(), senderBus.close()]);
      receiverClient.disconnect();
      sender.disconnect();
    }
  });
});
