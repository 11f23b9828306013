// What start-up says of a Redis that tollgate cannot run on safely: a user refused the scripts keeps it
// from ready, naming Redis's refusal; an evicting maxmemory-policy is warned about, per node.
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { waitFor } from "../support/ports.js";
import {
  freeTollgatePorts,
  type RedisServer,
  startProcess,
  startRedisServer,
  startTollgate,
  tollgateEnv,
} from "../support/processes.mjs";
import { connectRedis } from "../support/redis.js";

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

const status = async (url: string): Promise<number> => (await fetch(url).catch(() => undefined))?.status ?? 0;

describe("a Redis user without permission for tollgate's scripts", () => {
  it("keeps tollgate from ready, with Redis's NOPERM in the log, until it is granted", async () => {
    // The users are in Redis already (an earlier start), so only the checks would need the scripts.
    const first = await startTollgate({ REDIS_URL: server.url });
    await first.stop();
    await admin.function("FLUSH");
    await admin.acl("SETUSER", "tg", "on", ">tg-password-1", "~*", "&*", "+@all", "-function");
    const ports = await freeTollgatePorts();
    const ready = `http://127.0.0.1:${ports.port}/ready`;
    const proc = startProcess({
      name: "tollgate-noperm",
      command: process.execPath,
      args: ["dist/src/main.js"],
      env: {
        ...tollgateEnv(ports),
        LOG_LEVEL: "info",
        REDIS_URL: `redis://tg:tg-password-1@127.0.0.1:${server.port}`,
      },
    });
    try {
      await waitFor(async () => proc.output().includes("NOPERM"), 15_000, "the NOPERM warning", proc);
      const line =
        proc
          .output()
          .split("\n")
          .find((l) => l.includes("NOPERM")) ?? "";
      expect(JSON.parse(line)).toMatchObject({
        event: "store_down",
        err: expect.stringContaining("function|load"),
      });
      expect(await status(ready)).toBe(503);
      await admin.acl("SETUSER", "tg", "+function");
      await waitFor(async () => (await status(ready)) === 200, 15_000, "ready once granted", proc);
    } finally {
      await proc.stop();
      await admin.acl("DELUSER", "tg");
    }
  });
});

describe("a Redis out of memory at a first start", () => {
  it("keeps tollgate from ready, with Redis's own refusal in the log, not a wrapper's", async () => {
    const empty = await startRedisServer();
    const client = connectRedis(empty.url);
    await client.config("SET", "maxmemory", "1");
    const ports = await freeTollgatePorts();
    const proc = startProcess({
      name: "tollgate-oom",
      command: process.execPath,
      args: ["dist/src/main.js"],
      env: { ...tollgateEnv(ports), LOG_LEVEL: "info", REDIS_URL: empty.url },
    });
    try {
      await waitFor(async () => proc.output().includes('"store_down"'), 15_000, "store_down", proc);
      const line =
        proc
          .output()
          .split("\n")
          .find((l) => l.includes('"store_down"')) ?? "";
      expect(JSON.parse(line).err).toMatch(/^OOM command not allowed/);
      expect(await status(`http://127.0.0.1:${ports.port}/ready`)).toBe(503);
    } finally {
      await proc.stop();
      client.disconnect();
      await empty.stop();
    }
  });
});

describe("a Redis whose maxmemory-policy evicts", () => {
  it("is warned about at start-up, naming the node and the policy; noeviction is not", async () => {
    await admin.config("SET", "maxmemory", "256mb");
    await admin.config("SET", "maxmemory-policy", "volatile-lru");
    try {
      const evicting = await startTollgate({ REDIS_URL: server.url });
      await waitFor(async () => evicting.output().includes("redis_evicts"), 5_000, "the warning", evicting);
      await evicting.stop();
      const line =
        evicting
          .output()
          .split("\n")
          .find((l) => l.includes("redis_evicts")) ?? "";
      expect(JSON.parse(line)).toMatchObject({
        level: "warn",
        node: `127.0.0.1:${server.port}`,
        policy: "volatile-lru",
        maxmemoryBytes: 256 * 1024 * 1024,
      });
      await admin.config("SET", "maxmemory-policy", "noeviction");
      const safe = await startTollgate({ REDIS_URL: server.url });
      // The warning comes after ready, in the background: give it the time it took above.
      await new Promise((resolve) => setTimeout(resolve, 500));
      await safe.stop();
      expect(safe.output()).not.toContain("redis_evicts");
    } finally {
      await admin.config("SET", "maxmemory", "0");
      await admin.config("SET", "maxmemory-policy", "noeviction");
    }
  });
});
