// How tollgate's Sentinel client follows +switch-master announcements, on real Sentinels. Each test
// has two Sentinels that never watch the same Redis: one names M, the other R, so that a test decides
// which Sentinel announces what. A Sentinel announces a switch when a hello message (the one Sentinels
// exchange) brings it a newer configuration for its master: the tests publish such hellos to it.
import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Redis } from "ioredis";
import { afterEach, describe, expect, it } from "vitest";
import { createRedisClient } from "../../src/store/redis/client.js";
import { findBinary } from "../support/binaries.js";
import { stopOnExit } from "../support/leftovers.mjs";
import { freePort, redisServerArgs, waitFor } from "../support/ports.js";
import { redisCli } from "../support/redis-topologies.js";

const NAME = "tollgate";
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

type World = {
  /** Ports of two masters: the client starts on M; R is another master. */
  m: number;
  r: number;
  /** The Sentinel that names M, and the one that names R (and watches `other` there too). */
  s1: number;
  s2: number;
  stop(): Promise<void>;
};

const stops: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const stop of stops.splice(0)) await stop();
});

async function start(binary: string, args: string[], port: number): Promise<ChildProcess> {
  const child = stopOnExit(spawn(binary, args, { stdio: "ignore" }));
  await waitFor(async () => (await redisCli(port, "PING")) === "PONG", 10_000, `${binary} on ${port}`);
  return child;
}

async function startWorld(): Promise<World> {
  const dir = mkdtempSync(join(tmpdir(), "tollgate-switch-"));
  const children: ChildProcess[] = [];
  const stop = async () => {
    await Promise.all(
      children.map(
        (child) =>
          new Promise<void>((resolve) => {
            if (child.exitCode !== null || child.signalCode !== null) return resolve();
            child.once("exit", () => resolve());
            child.kill("SIGTERM");
          }),
      ),
    );
    rmSync(dir, { recursive: true, force: true });
  };
  stops.push(stop);
  const [m, r, s1, s2] = [await freePort(), await freePort(), await freePort(), await freePort()];
  for (const port of [m, r])
    children.push(await start(findBinary("redis-server"), redisServerArgs(port), port));
  const sentinel = async (port: number, monitors: [string, number][]) => {
    const file = join(dir, `sentinel-${port}.conf`);
    const lines = [`port ${port}`, "bind 127.0.0.1", `dir ${dir}`];
    for (const [name, master] of monitors) {
      // Nothing here fails over by itself: only the tests' hellos move a master.
      lines.push(
        `sentinel monitor ${name} 127.0.0.1 ${master} 1`,
        `sentinel down-after-milliseconds ${name} 60000`,
        `sentinel failover-timeout ${name} 180000`,
      );
    }
    writeFileSync(file, `${lines.join("\n")}\n`);
    children.push(await start(findBinary("redis-sentinel"), [file], port));
  };
  await sentinel(s1, [[NAME, m]]);
  await sentinel(s2, [
    [NAME, r],
    ["other", r],
  ]);
  return { m, r, s1, s2, stop };
}

let epoch = 0;
/**
 * Has `sentinel` learn, from a hello of a Sentinel it does not know yet, that `name`'s master is now
 * on `port`: it switches and announces +switch-master. Resolves once the announcement was made.
 */
async function announce(sentinel: number, name: string, port: number): Promise<void> {
  epoch += 1;
  const hello = [
    "127.0.0.1",
    await freePort(),
    randomBytes(20).toString("hex"),
    epoch,
    name,
    "127.0.0.1",
    port,
    epoch,
  ];
  expect(await redisCli(sentinel, "PUBLISH", "__sentinel__:hello", hello.join(","))).toBe("1");
  await waitFor(
    async () => (await redisCli(sentinel, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", name)).endsWith(`\n${port}`),
    5_000,
    `Sentinel ${sentinel} to name ${port} for ${name}`,
  );
}

/** tollgate's client on the Sentinels, as tollgate configures it, with what happens to its connection. */
async function connect(world: World, sentinels = [world.s1, world.s2]) {
  const redis = createRedisClient({
    settings: {
      topology: {
        kind: "sentinel",
        sentinels: sentinels.map((port) => ({ host: "127.0.0.1", port })),
        master: NAME,
      },
      username: undefined,
      password: undefined,
      tls: false,
      sentinelPassword: undefined,
    },
    commandTimeoutMs: 2_000,
  }) as Redis;
  redis.on("error", () => undefined);
  const events = { closed: 0, failed: 0 };
  redis.on("close", () => {
    events.closed += 1;
  });
  stops.push(async () => {
    redis.disconnect();
  });
  await waitFor(async () => redis.status === "ready", 10_000, "the client to connect");
  /** The port of the Redis the client talks to now. */
  const port = async () => Number(((await redis.config("GET", "port")) as string[])[1]);
  /** Commands every few ms from now on: the ones that fail show a connection that was dropped. */
  let running = true;
  const load = (async () => {
    while (running) {
      await redis.ping().catch(() => {
        events.failed += 1;
      });
      await sleep(5);
    }
  })();
  stops.push(async () => {
    running = false;
    await load;
  });
  return { redis, events, port };
}

describe("the Sentinel client", () => {
  it("keeps its connection when a Sentinel announces as the new master the one it is already on", async () => {
    const world = await startWorld();
    const client = await connect(world);
    expect(await client.port()).toBe(world.m);
    // A Sentinel that learns of a failover late announces it after clients already follow it.
    await announce(world.s2, NAME, world.m);
    await sleep(500);
    expect(client.events).toEqual({ closed: 0, failed: 0 });
    expect(await client.port()).toBe(world.m);
  });

  it("ignores an announcement about another master its Sentinels watch", async () => {
    const world = await startWorld();
    const client = await connect(world);
    await announce(world.s2, "other", await freePort());
    await sleep(500);
    expect(client.events).toEqual({ closed: 0, failed: 0 });
    expect(await client.port()).toBe(world.m);
  });

  it("listens to the Sentinels that its Sentinels know of, not only to those it was given", async () => {
    const world = await startWorld();
    // S1 learns of S2 as Sentinels do, from a hello of S2's (same master and epoch: nothing moves).
    const runId = /run_id:(\w+)/.exec(await redisCli(world.s2, "INFO", "server"))?.[1] as string;
    const hello = ["127.0.0.1", world.s2, runId, 0, NAME, "127.0.0.1", world.m, 0].join(",");
    await redisCli(world.s1, "PUBLISH", "__sentinel__:hello", hello);
    expect(await redisCli(world.s1, "SENTINEL", "SENTINELS", NAME)).toContain(runId);
    const subscribers = async () =>
      (await redisCli(world.s2, "CLIENT", "LIST")).split("\n").filter((line) => / sub=1 /.test(line));
    expect(await subscribers()).toEqual([]);
    await connect(world, [world.s1]);
    await waitFor(async () => (await subscribers()).length === 1, 5_000, "a subscription on S2");
  });

  it("moves to the master the Sentinels name once one announces that its master moved", async () => {
    const world = await startWorld();
    const client = await connect(world);
    await announce(world.s2, NAME, world.r);
    await announce(world.s1, NAME, world.r);
    await waitFor(async () => (await client.port().catch(() => 0)) === world.r, 5_000, "the client on R");
    expect(client.events.closed).toBeGreaterThan(0);
  });
});
