// A Redis connection that goes dark (no close, no reset, no answer) is dropped and made again.
import { Cluster } from "ioredis";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import type { Decision } from "../../src/check/types.js";
import { logRule } from "../../src/ratelimit/types.js";
import { MAX_BACKLOG } from "../../src/store/redis/backlog.js";
import { createRedisClient, type RedisClient } from "../../src/store/redis/client.js";
import { createRedisInvalidations } from "../../src/store/redis/invalidations.js";
import { watchConnections } from "../../src/store/redis/watchdog.js";
import { createRedisStore } from "../../src/store/store.js";
import { type DarkProxy, startDarkProxy } from "../support/dark-proxy.js";
import { demoToken, type InProcessOnRedis, startInProcess } from "../support/in-process.js";
import { startRedisServer } from "../support/processes.mjs";
import { connectRedis, connectTopology, redisUrl } from "../support/redis.js";

const WATCHDOG = { intervalMs: 100, silenceMs: 600 };
const target = () => {
  const url = new URL(redisUrl());
  return { host: url.hostname, port: Number(url.port) };
};

async function eventually<T>(probe: () => Promise<T>, ok: (value: T) => boolean, ms: number): Promise<T> {
  const until = Date.now() + ms;
  for (;;) {
    const value = await probe();
    if (ok(value) || Date.now() > until) return value;
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe("a check path whose Redis connection goes dark", () => {
  let proxy: DarkProxy;
  let client: RedisClient;
  let tollgate: InProcessOnRedis;
  let token = "";

  beforeAll(async () => {
    proxy = await startDarkProxy(target());
    // Made as tollgate makes its own (no offline queue), but through the proxy.
    client = createRedisClient({ url: proxy.url });
    await new Promise((resolve) => client.once("ready", resolve));
    tollgate = await startInProcess({
      redis: client as InProcessOnRedis["redis"],
      watchdog: WATCHDOG,
      env: { REDIS_TIMEOUT_MS: "100", FAILURE_MODE: "open" },
    });
    token = await demoToken(tollgate.tollgate.auth, "alice");
  });
  afterAll(async () => {
    await tollgate.close();
    await proxy.close();
  });

  const check = async () =>
    tollgate.tollgate.checker({
      method: "GET",
      path: "/api/products",
      authorization: `Bearer ${token}`,
      ip: "192.0.2.9",
    });

  it("degrades while it is silent, then enforces again on a new connection by itself", async () => {
    expect(await check()).toMatchObject({ kind: "allow", degraded: false });
    const connectionsBefore = proxy.accepted();
    proxy.darken();
    const during = await check();
    expect(during).toMatchObject({ kind: "allow", degraded: true });
    // Nothing closed the connection: only the watchdog can notice that nothing comes back.
    const after = await eventually(check, (d) => d.kind === "allow" && !d.degraded, 5_000);
    expect(after).toMatchObject({ kind: "allow", degraded: false, limit: { category: "general" } });
    expect(proxy.accepted()).toBeGreaterThan(connectionsBefore);
    // Counted in Redis again: the window holds the first check and this one at least.
    expect(after.kind === "allow" && after.limit !== undefined && after.limit.used >= 2).toBe(true);
  });

  it("says in the log why it dropped the connection, naming no secret", () => {
    const lines = tollgate.logWrites().filter((line) => line.includes("no answer from Redis"));
    expect(lines.length).toBeGreaterThanOrEqual(1);
    for (const line of lines) expect(line).not.toContain(token);
  });
});

describe("a Redis whose answers come around REDIS_TIMEOUT_MS", () => {
  it("is logged as one outage, whose end is logged once the store answered for a second", async () => {
    const proxy = await startDarkProxy(target());
    const client = createRedisClient({ url: proxy.url });
    await new Promise((resolve) => client.once("ready", resolve));
    const tollgate = await startInProcess({
      redis: client as InProcessOnRedis["redis"],
      env: { REDIS_TIMEOUT_MS: "100", FAILURE_MODE: "open" },
    });
    try {
      const token = await demoToken(tollgate.tollgate.auth, "ent_carol");
      const check = () =>
        tollgate.tollgate.checker({
          method: "GET",
          path: "/api/products",
          authorization: `Bearer ${token}`,
          ip: "192.0.2.10",
        });
      const checksFor = async (ms: number) => {
        const until = Date.now() + ms;
        const answers = await Promise.all(
          Array.from({ length: 8 }, async () => {
            const seen: Decision[] = [];
            // Paced: an enterprise user's 10,000 an hour must not run out (its refusals come from the denial cache).
            while (Date.now() < until) {
              seen.push(await check());
              await new Promise((resolve) => setTimeout(resolve, 20));
            }
            return seen;
          }),
        );
        return answers.flat();
      };
      const events = (name: string) =>
        tollgate.logWrites().filter((line) => line.includes(`"event":"${name}"`)).length;
      proxy.slowReplies(60, 140);
      const flapping = await checksFor(2_000);
      // Checks missed the deadline and met it in turn: the store went down and up many times.
      const degraded = flapping.filter((d) => d.kind === "allow" && d.degraded).length;
      expect([degraded > 5, flapping.length - degraded > 5]).toEqual([true, true]);
      expect([events("store_down"), events("store_recovered")]).toEqual([1, 0]);
      proxy.slowReplies(0, 0);
      await checksFor(1_500);
      expect([events("store_down"), events("store_recovered")]).toEqual([1, 1]);
    } finally {
      await tollgate.close();
      await proxy.close();
    }
  });
});

describe("an invalidations subscription whose connection goes dark", () => {
  it("reports itself unhealthy, subscribes again on a new connection, and hears announcements again", async () => {
    const proxy = await startDarkProxy(target());
    const sender = connectRedis();
    const receiverClient = createRedisClient({ url: proxy.url });
    // Its heartbeat goes out on its client's connection, which goes dark too: watched as the store watches it.
    const watchdog = watchConnections(receiverClient, WATCHDOG);
    const channel = `test-dark-${Math.random().toString(36).slice(2)}`;
    const senderBus = createRedisInvalidations({
      redis: sender,
      channel,
      peersKey: `{${channel}}:peers`,
      heartbeat: WATCHDOG,
    });
    const receiver = createRedisInvalidations({
      redis: receiverClient,
      channel,
      peersKey: `{${channel}}:peers`,
      heartbeat: WATCHDOG,
    });
    const got: string[] = [];
    const health: boolean[] = [];
    receiver.subscribe({ message: (s) => got.push(s), health: (h) => health.push(h) });
    try {
      await eventually(
        async () => health.at(-1),
        (h) => h === true,
        5_000,
      );
      expect(health.at(-1)).toBe(true);
      await senderBus.publish("u:1");
      await eventually(
        async () => got.length,
        (n) => n > 0,
        2_000,
      );
      expect(got).toEqual(["u:1"]);

      const before = health.length;
      proxy.darken();
      await senderBus.publish("u:lost");
      // The receiver's connection never closed: its heartbeat going unheard is all there is to see.
      await eventually(
        async () => health.slice(before).includes(false),
        (down) => down,
        5_000,
      );
      expect(health.slice(before)).toContain(false);
      await eventually(
        async () => health.at(-1),
        (h) => h === true,
        5_000,
      );
      expect(health.at(-1)).toBe(true);
      expect(got).not.toContain("u:lost");
      await senderBus.publish("u:2");
      await eventually(
        async () => got.includes("u:2"),
        (heard) => heard,
        2_000,
      );
      expect(got).toContain("u:2");
    } finally {
      watchdog.stop();
      await receiver.close();
      receiverClient.disconnect();
      sender.disconnect();
      await proxy.close();
    }
  });
});

describe("an invalidations subscription that lags", () => {
  it("is never trusted while its heartbeat comes back later than silenceMs, though it comes back", async () => {
    const proxy = await startDarkProxy(target());
    // Every reply a second late, announcements and heartbeats included: none is lost, all are stale.
    proxy.slowReplies(1_000, 1_000);
    const receiverClient = createRedisClient({ url: proxy.url });
    const channel = `test-lag-${Math.random().toString(36).slice(2)}`;
    const receiver = createRedisInvalidations({
      redis: receiverClient,
      channel,
      peersKey: `{${channel}}:peers`,
      heartbeat: WATCHDOG,
    });
    const health: boolean[] = [];
    receiver.subscribe({ message: () => undefined, health: (h) => health.push(h) });
    try {
      // Connecting takes a few late replies; then the subscription has seconds to be trusted, or not.
      await eventually(
        async () => receiverClient.status,
        (status) => status === "ready",
        10_000,
      );
      await new Promise((r) => setTimeout(r, 3_000));
      expect(health).not.toContain(true);
    } finally {
      await receiver.close();
      receiverClient.disconnect();
      await proxy.close();
    }
  });
});

describe("a Redis connection whose replies go dark while its commands still arrive", () => {
  it("fails the commands it carried rather than send them again on the new connection, where they would run twice", async () => {
    const proxy = await startDarkProxy(target());
    // Made as tollgate makes its own (no offline queue), but through the proxy.
    const client = createRedisClient({ url: proxy.url });
    await new Promise((resolve) => client.once("ready", resolve));
    const watchdog = watchConnections(client, WATCHDOG);
    const plain = connectRedis();
    const key = `test-one-way:${Math.random().toString(36).slice(2)}`;
    try {
      proxy.darkenReplies();
      const writes = Array.from({ length: 5 }, () => client.incr(key));
      const settled = await Promise.allSettled(writes);
      // Redis ran each once, when it got it; no reply came back, so none can say it succeeded.
      expect(await plain.get(key)).toBe("5");
      expect(settled.map((s) => s.status)).toEqual(writes.map(() => "rejected"));
      // The new connection serves as usual once it is up.
      if (client.status !== "ready") await new Promise((resolve) => client.once("ready", resolve));
      expect(await client.incr(key)).toBe(6);
    } finally {
      watchdog.stop();
      plain.disconnect();
      client.disconnect();
      await proxy.close();
    }
  });
});

describe("a Redis that stalls (busy, paused) rather than going dark", () => {
  it("keeps the connection, so that the commands it carried run once when Redis resumes", async () => {
    // A Redis of its own: the pause would stall every other test file on the shared one.
    const server = await startRedisServer();
    const client = createRedisClient({ url: server.url });
    await new Promise((resolve) => client.once("ready", resolve));
    const watchdog = watchConnections(client, WATCHDOG);
    const pauser = connectRedis(server.url);
    const key = `test-stall:${Math.random().toString(36).slice(2)}`;
    try {
      const idBefore = await client.client("ID");
      // Every client's commands wait, new connections' too: the PING unanswered, the fresh one as well.
      await pauser.call("CLIENT", "PAUSE", "2000", "ALL");
      const writes = Array.from({ length: 20 }, () => client.incr(key));
      const settled = await Promise.allSettled(writes);
      expect(settled.map((s) => s.status)).toEqual(writes.map(() => "fulfilled"));
      // Run once each: no new connection carried them a second time.
      expect(await pauser.get(key)).toBe("20");
      expect(await client.client("ID")).toBe(idBefore);
    } finally {
      watchdog.stop();
      pauser.disconnect();
      client.disconnect();
      await server.stop();
    }
  });
});

describe("a Redis that stops reading for good under steady checks", () => {
  it("carries at most MAX_BACKLOG calls unanswered: the ones past it fail at once, unsent", async () => {
    // A Redis of its own, stopped as a frozen host is: the connection stays open, nothing is read.
    const server = await startRedisServer();
    const client = createRedisClient({ url: server.url });
    const store = createRedisStore({ redis: client, prefix: "tg:" });
    const pid = server.process()?.child.pid as number;
    const layers = [{ subject: "ip:192.0.2.90", category: "general", rule: logRule(1_000_000, 60_000) }];
    const call = () => store.unguarded.limiter.limit({ layers });
    try {
      expect(await store.connected(5_000)).toBe(true);
      // Loads the scripts, so that every later call is one command.
      expect((await call()).kind).toBe("limited");
      process.kill(pid, "SIGSTOP");
      const calls = Array.from({ length: MAX_BACKLOG + 200 }, call);
      // Every call past the bound was refused without a command; the others wait on Redis.
      expect(client.commandQueue.length).toBeLessThanOrEqual(MAX_BACKLOG);
      process.kill(pid, "SIGCONT");
      const settled = await Promise.allSettled(calls);
      const refused = settled.filter((s) => s.status === "rejected");
      expect(refused.length).toBeGreaterThanOrEqual(200);
      expect(new Set(refused.map((s) => (s.reason as Error).name))).toEqual(new Set(["BacklogFullError"]));
      // Those sent ran once Redis resumed, and Redis serves new calls as before.
      expect(settled.length - refused.length).toBeGreaterThan(MAX_BACKLOG - 10);
      expect((await call()).kind).toBe("limited");
    } finally {
      process.kill(pid, "SIGCONT");
      await store.close();
      await server.stop();
    }
  });
});

describe("a Redis Cluster node whose connection goes dark", () => {
  it("is dropped and connected anew, and the keys of its slots are served again", async () => {
    // One proxy per master; the client reaches each node through its proxy (natMap), so that the
    // connections can be darkened while the cluster itself stays healthy.
    const seeds = inject("clusterNodes")
      .split(",")
      .map((seed) => {
        const [host, port] = seed.split(":");
        return { host: host as string, port: Number(port) };
      });
    const proxies = await Promise.all(seeds.map((seed) => startDarkProxy(seed)));
    const natMap = Object.fromEntries(
      seeds.map((seed, i) => [`${seed.host}:${seed.port}`, { host: "127.0.0.1", port: portOf(proxies[i]) }]),
    );
    const cluster = new Cluster([{ host: "127.0.0.1", port: portOf(proxies[0]) }], {
      natMap,
      enableOfflineQueue: false,
      scaleReads: "master",
      retryDelayOnFailover: 100,
      redisOptions: { commandTimeout: 5_000, maxRetriesPerRequest: 1 },
    });
    const watchdog = watchConnections(cluster, WATCHDOG);
    const keys = Array.from({ length: 30 }, (_, i) => `test-dark-cluster:{k${i}}`);
    const roundTrip = () =>
      Promise.all(keys.map((key) => withTimeout(cluster.incr(key), 300))).then(
        () => true,
        () => false,
      );
    try {
      await new Promise((resolve) => cluster.once("ready", resolve));
      // The first commands also connect to every master: give them the time a busy machine takes.
      expect(await eventually(roundTrip, (ok) => ok, 5_000)).toBe(true);
      const masters = proxies.filter((p) =>
        cluster.nodes("master").some((node) => node.options.port === portOf(p)),
      );
      expect(masters).toHaveLength(3);
      const before = masters.map((p) => p.accepted());
      for (const proxy of proxies) proxy.darken();
      expect(await roundTrip()).toBe(false);
      const recovered = await eventually(roundTrip, (ok) => ok, 8_000);
      expect(recovered).toBe(true);
      // Every master was reached again on a connection made after the dark one.
      expect(masters.map((p, i) => p.accepted() > (before[i] as number))).toEqual([true, true, true]);
    } finally {
      watchdog.stop();
      cluster.disconnect();
      await Promise.all(proxies.map((p) => p.close()));
    }
  });
});

describe("a Redis Cluster node connection whose replies go dark while its commands still arrive", () => {
  it("fails the commands it carried rather than send them again on another connection, where they would run twice", async () => {
    // A proxy in front of every node of the shared cluster; the client, made as tollgate makes its
    // own, reaches each node through its proxy.
    const seeds = inject("clusterNodes")
      .split(",")
      .map((seed) => {
        const [host, port] = seed.split(":");
        return { host: host as string, port: Number(port) };
      });
    const proxies = await Promise.all(seeds.map((seed) => startDarkProxy(seed)));
    const natMap = Object.fromEntries(
      seeds.map((seed, i) => [`${seed.host}:${seed.port}`, { host: "127.0.0.1", port: portOf(proxies[i]) }]),
    );
    const settings = {
      topology: {
        kind: "cluster" as const,
        nodes: proxies.map((p) => ({ host: "127.0.0.1", port: portOf(p) })),
      },
      username: undefined,
      password: undefined,
      tls: false,
      sentinelPassword: undefined,
    };
    const client = createRedisClient({ settings, natMap }) as Cluster;
    const watchdog = watchConnections(client, WATCHDOG);
    const plain = connectTopology("cluster") as Cluster;
    const key = `test-one-way-cluster:{${Math.random().toString(36).slice(2)}}`;
    try {
      await new Promise((resolve) => client.once("ready", resolve));
      // The first command also connects to the key's master.
      expect(
        await eventually(
          () => client.incr(key).catch(() => 0),
          (n) => n > 0,
          5_000,
        ),
      ).toBe(1);
      // Only the replies of the key's master go dark: the other masters stay as they were.
      const slot = Number(await plain.cluster("KEYSLOT", key));
      const ranges = (await plain.cluster("SLOTS")) as unknown as [number, number, [string, number]][];
      const master = ranges.find(([from, to]) => slot >= from && slot <= to)?.[2][1];
      proxies[seeds.findIndex((seed) => seed.port === master)]?.darkenReplies();
      const writes = Array.from({ length: 5 }, () => client.incr(key));
      const settled = await Promise.allSettled(writes);
      // Redis ran each once, when it got it; no reply came back, so none can say it succeeded.
      expect(await plain.get(key)).toBe("6");
      expect(settled.map((s) => s.status)).toEqual(writes.map(() => "rejected"));
      // A new connection to that master serves as usual.
      expect(
        await eventually(
          () => client.incr(key).catch(() => 0),
          (n) => n > 0,
          5_000,
        ),
      ).toBe(7);
    } finally {
      watchdog.stop();
      plain.disconnect();
      client.disconnect();
      await Promise.all(proxies.map((p) => p.close()));
    }
  });
});

const portOf = (proxy: DarkProxy | undefined): number => Number(new URL(proxy?.url ?? "").port);

function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("timed out")), ms);
    promise.then(
      (value) => {
        clearTimeout(timer);
        resolve(value);
      },
      (error: unknown) => {
        clearTimeout(timer);
        reject(error);
      },
    );
  });
}
