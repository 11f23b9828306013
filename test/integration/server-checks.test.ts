// What start-up asks of a real Redis: an evicting maxmemory-policy is found, a user refused the scripts is told apart.
import type { Cluster, Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createRedisClient } from "../../src/store/redis/client.js";
import { evictingNodes, scriptsPermitted } from "../../src/store/redis/server-checks.js";
import { type RedisServer, startRedisServer } from "../support/processes.mjs";
import { connectRedis, connectTopology, testPrefix } from "../support/redis.js";

// A Redis of its own: these tests change its memory settings and users.
let server: RedisServer;
let admin: Redis;
beforeAll(async () => {
  server = await startRedisServer();
  admin = connectRedis(server.url);
});
afterAll(async () => {
  admin?.disconnect();
  await server?.stop();
});

async function client(url = server.url) {
  const redis = createRedisClient({ url });
  await new Promise((resolve) => redis.once("ready", resolve));
  return redis;
}

async function memory(maxmemory: string, policy: string) {
  await admin.config("SET", "maxmemory", maxmemory);
  await admin.config("SET", "maxmemory-policy", policy);
}

describe("evictingNodes", () => {
  it("names a node whose policy evicts once it has a maxmemory", async () => {
    const redis = await client();
    try {
      for (const policy of ["volatile-lru", "allkeys-lru", "volatile-ttl", "allkeys-random"]) {
        await memory("64mb", policy);
        expect(await evictingNodes(redis)).toEqual([
          { node: `127.0.0.1:${server.port}`, policy, maxmemoryBytes: 64 * 1024 * 1024 },
        ]);
      }
    } finally {
      await memory("0", "noeviction");
      redis.disconnect();
    }
  });

  it("names none under noeviction, nor without a maxmemory (no policy ever runs)", async () => {
    const redis = await client();
    try {
      await memory("64mb", "noeviction");
      expect(await evictingNodes(redis)).toEqual([]);
      await memory("0", "allkeys-lru");
      expect(await evictingNodes(redis)).toEqual([]);
    } finally {
      await memory("0", "noeviction");
      redis.disconnect();
    }
  });

  it("names none when its user may not ask (no INFO in its ACL)", async () => {
    await memory("64mb", "allkeys-lru");
    await admin.acl("SETUSER", "noinfo", "on", ">noinfo-pw-1", "~*", "&*", "+@all", "-info");
    const redis = await client(`redis://noinfo:noinfo-pw-1@127.0.0.1:${server.port}`);
    try {
      expect(await evictingNodes(redis)).toEqual([]);
    } finally {
      await memory("0", "noeviction");
      redis.disconnect();
    }
  });
});

describe("evictingNodes on the shared Sentinel and Cluster setups", () => {
  // 1 GB, far above what the tests store: the policy shows, and nothing is evicted from other files.
  async function whileEvicting<T>(nodes: Redis[], body: () => Promise<T>): Promise<T> {
    try {
      for (const node of nodes) {
        await node.config("SET", "maxmemory", "1gb");
        await node.config("SET", "maxmemory-policy", "allkeys-lru");
      }
      return await body();
    } finally {
      for (const node of nodes) {
        await node.config("SET", "maxmemory", "0");
        await node.config("SET", "maxmemory-policy", "noeviction");
      }
    }
  }

  it("names the master the Sentinels gave, by its address, not the client's default", async () => {
    const sentinel = connectTopology("sentinel") as Redis;
    await new Promise((resolve) => sentinel.once("ready", resolve));
    const [host, port] = [sentinel.stream.remoteAddress, sentinel.stream.remotePort];
    const master = connectRedis(`redis://${host}:${port}`);
    try {
      const found = await whileEvicting([master], () => evictingNodes(sentinel));
      expect(found).toEqual([{ node: `${host}:${port}`, policy: "allkeys-lru", maxmemoryBytes: 1024 ** 3 }]);
    } finally {
      master.disconnect();
      sentinel.disconnect();
    }
  });

  it("names every master of a Cluster, and no replica", async () => {
    const cluster = connectTopology("cluster") as Cluster;
    await new Promise((resolve) => cluster.once("ready", resolve));
    const masters = cluster.nodes("master");
    try {
      const found = await whileEvicting(masters, () => evictingNodes(cluster));
      expect(found.map((n) => n.node).sort()).toEqual(
        masters.map((m) => `${m.options.host}:${m.options.port}`).sort(),
      );
      expect(masters.length).toBeGreaterThan(1);
    } finally {
      cluster.disconnect();
    }
  });
});

describe("scriptsPermitted", () => {
  const users = {
    nofunction: ["-function"],
    nofcall: ["-fcall"],
  } as const;

  it("rejects NOPERM for a user without FCALL, or without FUNCTION LOAD while the libraries are missing", async () => {
    for (const [name, rules] of Object.entries(users)) {
      await admin.function("FLUSH");
      await admin.acl("SETUSER", name, "on", `>${name}-pw-1`, "~*", "&*", "+@all", ...rules);
      const redis = await client(`redis://${name}:${name}-pw-1@127.0.0.1:${server.port}`);
      try {
        await expect(scriptsPermitted(redis, `${testPrefix()}probe`), name).rejects.toThrow(/^NOPERM/);
      } finally {
        redis.disconnect();
      }
    }
  });

  it("resolves for a user that may run them, loading them when missing, and leaves no key", async () => {
    await admin.function("FLUSH");
    const redis = await client();
    const key = `${testPrefix()}probe`;
    try {
      await scriptsPermitted(redis, key);
      expect(await admin.exists(key)).toBe(0);
      expect(String(await admin.function("LIST", "LIBRARYNAME", "tollgate_windowRelease_*"))).toContain(
        "tollgate_windowRelease",
      );
    } finally {
      redis.disconnect();
    }
  });

  it("resolves through an outage the checks degrade through: out of memory, or Redis gone", async () => {
    const redis = await client();
    try {
      await memory("1", "noeviction");
      await scriptsPermitted(redis, `${testPrefix()}probe`);
      await memory("0", "noeviction");
      redis.disconnect();
      await scriptsPermitted(redis, `${testPrefix()}probe`);
    } finally {
      await memory("0", "noeviction");
      redis.disconnect();
    }
  });
});
