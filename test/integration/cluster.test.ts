// Redis Cluster (3 masters, 3 replicas, started once per run): the identity and rate-limit contracts
// unchanged, scripts served by whichever master owns the slot, and keys spread over every master.
import type { Cluster } from "ioredis";
import { afterAll, describe, expect, inject, it } from "vitest";
import { allUsers, syncUsersFile } from "../../src/auth/users-sync.js";
import type { Rule } from "../../src/config/rules.js";
import { createLogger } from "../../src/process/logger.js";
import { Withdrawal } from "../../src/ratelimit/limiter.js";
import { IP_LAYER, logRule, userSubject } from "../../src/ratelimit/types.js";
import { createRedisClient, type RedisClient } from "../../src/store/redis/client.js";
import { createKeys } from "../../src/store/redis/keys.js";
import { createRedisStore } from "../../src/store/store.js";
import { describeExternalIdentityContract } from "../contract/external-identity-contract.js";
import { describeIdentityContract } from "../contract/identity-contract.js";
import { describeRateLimitContract } from "../contract/rate-limit-contract.js";
import { fileTarget } from "../support/in-process.js";
import { redisLimiter, userChecks } from "../support/limiters.js";
import { connectTopology, testPrefix, userWithSession } from "../support/redis.js";
import { redisCli } from "../support/redis-topologies.js";

const cluster = connectTopology("cluster") as Cluster;

/** The client with every `command` sent through `around`, as over a slow or broken link to one master. */
function intercepting(
  redis: RedisClient,
  command: string,
  around: (send: () => unknown) => Promise<unknown>,
): RedisClient {
  return new Proxy(redis, {
    get(target, property) {
      const value: unknown = Reflect.get(target, property, target);
      if (typeof value !== "function") return value;
      const bound = (value as (...args: unknown[]) => unknown).bind(target);
      // A script is a function call (FCALL tollgate_<script>_<hash>), reached through call().
      const script = (args: unknown[]) =>
        args[0] === "FCALL" && String(args[1]).startsWith(`tollgate_${command}_`);
      if (property === "call" || property === "callBuffer")
        return (...args: unknown[]) => (script(args) ? around(() => bound(...args)) : bound(...args));
      if (property !== command) return bound;
      return (...args: unknown[]) => around(() => bound(...args));
    },
  });
}

const delaying = (redis: RedisClient, command: string, ms: number): RedisClient =>
  intercepting(redis, command, async (send) => {
    await new Promise((resolve) => setTimeout(resolve, ms));
    return send();
  });

const failing = (redis: RedisClient, command: string): RedisClient =>
  intercepting(redis, command, async () => {
    throw new Error(`${command}: the connection to its master was lost`);
  });
const silent = createLogger("silent");

const seedsOf = (nodes: string) =>
  nodes.split(",").map((seed) => {
    const [host, port] = seed.split(":");
    return { host: host as string, port: Number(port) };
  });

/** The ports of the shared cluster's masters that serve slots. */
async function masterPorts(): Promise<number[]> {
  const ranges = (await cluster.cluster("SLOTS")) as unknown as [number, number, [string, number]][];
  return [...new Set(ranges.map((range) => range[2][1]))];
}

const ready = async (client: Cluster): Promise<void> => {
  if (client.status !== "ready") await new Promise((resolve) => client.once("ready", resolve));
};

const nodeId = (port: number) => redisCli(port, "CLUSTER", "MYID");

/** A slot half moved from the master on `from` to the one on `to`, as `redis-cli --cluster reshard` starts it. */
async function startMigration(slot: string, from: number, to: number): Promise<void> {
  await redisCli(to, "CLUSTER", "SETSLOT", slot, "IMPORTING", await nodeId(from));
  await redisCli(from, "CLUSTER", "SETSLOT", slot, "MIGRATING", await nodeId(to));
}

/** The slot's keys moved (other tests' too) and the slot given to `to`, told to every master. */
async function finishMigration(slot: string, from: number, to: number): Promise<void> {
  for (;;) {
    const keys = (await redisCli(from, "CLUSTER", "GETKEYSINSLOT", slot, "100")).split("\n").filter(Boolean);
    if (keys.length === 0) break;
    await redisCli(from, "MIGRATE", "127.0.0.1", String(to), "", "0", "5000", "KEYS", ...keys);
  }
  const id = await nodeId(to);
  for (const port of [to, from, ...(await masterPorts())])
    await redisCli(port, "CLUSTER", "SETSLOT", slot, "NODE", id);
}
afterAll(async () => {
  await cluster.quit();
});

describeRateLimitContract("redis cluster", {
  create: async (now) => ({
    store: redisLimiter({ redis: cluster, keys: createKeys(testPrefix()), clock: now }),
    close: async () => {},
  }),
});

describeIdentityContract("redis cluster", () =>
  createRedisStore({ redis: connectTopology("cluster"), prefix: testPrefix() }),
);

describeExternalIdentityContract("redis cluster", () =>
  createRedisStore({ redis: connectTopology("cluster"), prefix: testPrefix() }),
);

describe("tollgate on a redis cluster", () => {
  it("runs its scripts on a master that never saw them (NOSCRIPT answered with EVAL there)", async () => {
    const keys = createKeys(testPrefix());
    const store = redisLimiter({ redis: cluster, keys });
    const subjects = Array.from({ length: 30 }, (_, i) => `u:flush-${i}`);
    const rule = [{ category: "general", rule: logRule(2, 60_000) }];
    for (const subject of subjects) expect((await store.hit(subject, rule)).allowed).toBe(true);
    const masters = cluster.nodes("master");
    expect(masters).toHaveLength(3);
    await Promise.all(masters.map((node) => node.script("FLUSH")));
    const replies = await Promise.all(subjects.map((subject) => store.hit(subject, rule)));
    expect(replies.map((r) => [r.allowed, r.remaining])).toEqual(subjects.map(() => [true, 0]));
    const third = await Promise.all(subjects.map((subject) => store.hit(subject, rule)));
    expect(third.every((r) => !r.allowed)).toBe(true);
  });

  it("counts the IP layer and a user's window, in two slots, in both or in neither", async () => {
    const prefix = testPrefix();
    const keys = createKeys(prefix);
    const store = createRedisStore({ redis: cluster, prefix });
    const authorizer = userChecks(redisLimiter({ redis: cluster, keys }));
    const limiter = redisLimiter({ redis: cluster, keys });
    const session = (username: string) => userWithSession(store, username);
    const ipRule = logRule(3, 60_000);
    const ip = { subject: "ip:198.51.100.99", rule: ipRule };
    const rules = new Map([["free", logRule(2, 60_000)]]);
    const ask = (who: { userId: string; sessionId: string }) =>
      authorizer.authorize({ ...who, category: "general", rules, ip, idleMs: 60_000, dryRun: false });
    const one = await session("layers-one");
    // Different masters, or the test would not show the split.
    const slot = (key: string) => cluster.call("CLUSTER", "KEYSLOT", key);
    expect(await slot(keys.user(one.userId))).not.toBe(await slot(keys.record(ip.subject)));
    expect((await ask(one)).kind === "ok" && (await ask(one)).kind === "ok").toBe(true);
    const refused = await ask(one);
    expect(refused).toMatchObject({ kind: "ok", hit: { allowed: false, layer: 1 } });
    // The refused request was taken back from the IP layer: two counted there, not three.
    await new Promise((r) => setTimeout(r, 50));
    const ipLayer = { category: "ip", rule: ipRule };
    expect((await limiter.peek(ip.subject, ipLayer))[0]).toMatchObject({ used: 2, remaining: 1 });
    const two = await session("layers-two");
    expect(await ask(two)).toMatchObject({ kind: "ok", hit: { allowed: true } });
    expect(await ask(two)).toMatchObject({ kind: "ip_denied", hit: { allowed: false, layer: 0, limit: 3 } });
    expect(
      (await limiter.peek(userSubject(two.userId), { category: "general", rule: logRule(2, 60_000) }))[0],
    ).toMatchObject({
      used: 1,
    });
  });

  it("takes back both slots' counts of a request refused before the user's call answered", async () => {
    const prefix = testPrefix();
    const keys = createKeys(prefix);
    const store = createRedisStore({ redis: cluster, prefix });
    const who = await userWithSession(store, "withdrawn");
    // The user's limit call (its keys tagged {u:…}) reaches Redis late, as behind a stalled master;
    // the address's call, in another slot, answers at once.
    const late = new Proxy(cluster, {
      get(target, property) {
        const value: unknown = Reflect.get(target, property, target);
        if (typeof value !== "function") return value;
        const bound = (value as (...args: unknown[]) => Promise<unknown>).bind(target);
        if (property !== "sendCommand") return bound;
        return async (command: { name: string; args: unknown[] }) => {
          const [fn, ...rest] = command.args;
          const limit = command.name === "fcall" && String(fn).startsWith("tollgate_limit_");
          if (limit && rest.some((arg) => String(arg).includes(`{u:${who.userId}}`)))
            await new Promise((resolve) => setTimeout(resolve, 200));
          return bound(command);
        };
      },
    }) as Cluster;
    const limiter = redisLimiter({ redis: late, keys });
    const ipLayer = { category: IP_LAYER, rule: logRule(5, 60_000) };
    const ip = { subject: "ip:198.51.100.98", ...ipLayer };
    const rules = new Map([["free", logRule(5, 60_000)]]);
    const withdrawal = new Withdrawal();
    const answer = limiter.limit({
      layers: [ip],
      identity: { ...who, idleMs: 60_000, category: "general", rules },
      withdrawal,
    });
    // The caller gives up and answers 503 while the user's call is on its way.
    await new Promise((resolve) => setTimeout(resolve, 100));
    withdrawal.refuse();
    expect(await answer).toMatchObject({ kind: "limited", allowed: true });
    await new Promise((resolve) => setTimeout(resolve, 100));
    const used = async (subject: string, layer: { category: string; rule: Rule }) =>
      (await redisLimiter({ redis: cluster, keys }).peek(subject, layer))[0]?.used;
    expect(await used(ip.subject, ipLayer)).toBe(0);
    expect(await used(userSubject(who.userId), { category: "general", rule: logRule(5, 60_000) })).toBe(0);
  });

  it("takes back the address's count of a request refused when the user's call failed", async () => {
    const prefix = testPrefix();
    const keys = createKeys(prefix);
    const store = createRedisStore({ redis: cluster, prefix });
    const who = await userWithSession(store, "lost");
    // The user's limit call fails (its master lost); the address's call, in another slot, counted.
    const lost = new Proxy(cluster, {
      get(target, property) {
        const value: unknown = Reflect.get(target, property, target);
        if (typeof value !== "function") return value;
        const bound = (value as (...args: unknown[]) => Promise<unknown>).bind(target);
        if (property !== "sendCommand") return bound;
        return async (command: { name: string; args: unknown[] }) => {
          const [fn, ...rest] = command.args;
          const limit = command.name === "fcall" && String(fn).startsWith("tollgate_limit_");
          if (limit && rest.some((arg) => String(arg).includes(`{u:${who.userId}}`)))
            throw new Error("the connection to its master was lost");
          return bound(command);
        };
      },
    }) as Cluster;
    const limiter = redisLimiter({ redis: lost, keys });
    const ipLayer = { category: IP_LAYER, rule: logRule(5, 60_000) };
    const ip = { subject: "ip:198.51.100.97", ...ipLayer };
    const rules = new Map([["free", logRule(5, 60_000)]]);
    const withdrawal = new Withdrawal();
    await expect(
      limiter.limit({
        layers: [ip],
        identity: { ...who, idleMs: 60_000, category: "general", rules },
        withdrawal,
      }),
    ).rejects.toThrow("the connection to its master was lost");
    // The caller answers 503 on the failure.
    withdrawal.refuse();
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect((await redisLimiter({ redis: cluster, keys }).peek(ip.subject, ipLayer))[0]?.used).toBe(0);
  });

  it("follows MOVED and ASK while a slot migrates, running each command once", async () => {
    // A client made as tollgate makes its own (no offline queue, no resending on a lost connection).
    const settings = {
      topology: { kind: "cluster" as const, nodes: seedsOf(inject("clusterNodes")) },
      username: undefined,
      password: undefined,
      tls: false,
      sentinelPassword: undefined,
    };
    const client = createRedisClient({ settings }) as Cluster;
    // A CLUSTER command sent while a client connects may go to a seed it is about to drop (a replica).
    await Promise.all([cluster, client].map(ready));
    const tag = `migrating-${Math.random().toString(36).slice(2)}`;
    const [key, fresh] = [`test:{${tag}}:old`, `test:{${tag}}:new`];
    const slot = String(await cluster.cluster("KEYSLOT", key));
    const ownerOf = async () => {
      const ranges = (await cluster.cluster("SLOTS")) as unknown as [number, number, [string, number]][];
      return ranges.find(([from, to]) => Number(slot) >= from && Number(slot) <= to)?.[2][1] as number;
    };
    const source = await ownerOf();
    const target = (await masterPorts()).find((port) => port !== source) as number;
    try {
      expect(await client.incr(key)).toBe(1);
      // Half moved: the source answers ASK for a key it does not hold, the target takes it after ASKING.
      await startMigration(slot, source, target);
      expect(await client.incr(fresh)).toBe(1);
      // Moved: the source answers MOVED, and the client's slot map still names it.
      await finishMigration(slot, source, target);
      expect(await client.incr(key)).toBe(2);
      expect(await ownerOf()).toBe(target);
      await startMigration(slot, target, source);
      await finishMigration(slot, target, source);
      expect(await client.incr(key)).toBe(3);
      expect([await cluster.get(key), await cluster.get(fresh)]).toEqual(["3", "1"]);
    } finally {
      client.disconnect();
      // Whatever happened, the slot goes back to where it was, settled.
      const owner = await ownerOf();
      if (owner !== source) {
        await startMigration(slot, owner, source).catch(() => undefined);
        await finishMigration(slot, owner, source);
      }
      for (const port of await masterPorts()) await redisCli(port, "CLUSTER", "SETSLOT", slot, "STABLE");
    }
  });

  it("checks the session and counts the user's window when the IP layer, in its own slot, is over its shadow limit", async () => {
    const prefix = testPrefix();
    const keys = createKeys(prefix);
    const store = createRedisStore({ redis: cluster, prefix });
    const authorizer = userChecks(redisLimiter({ redis: cluster, keys }));
    const limiter = redisLimiter({ redis: cluster, keys });
    const ipRule = logRule(1, 60_000);
    const ip = { subject: "ip:198.51.100.98", rule: ipRule, shadow: true };
    const userRule = logRule(2, 60_000);
    const rules = new Map([["free", userRule]]);
    const ask = (who: { userId: string; sessionId: string }) =>
      authorizer.authorize({ ...who, category: "general", rules, ip, idleMs: 60_000, dryRun: false });
    const one = await userWithSession(store, "shadow-one");
    expect(await ask(one)).toMatchObject({ kind: "ok", hit: { allowed: true } });
    // The address is full: the next user's session is still checked, and a revoked one refused.
    const two = await userWithSession(store, "shadow-two");
    await store.sessions.revoke(two.userId, two.sessionId);
    expect(await ask(two)).toEqual({ kind: "no_session" });
    const three = await userWithSession(store, "shadow-three");
    expect(await ask(three)).toMatchObject({ kind: "ok", tier: "free", hit: { allowed: false, layer: 0 } });
    expect(await ask(three)).toMatchObject({ kind: "ok", hit: { allowed: false, layer: 0 } });
    expect(await ask(three)).toMatchObject({ kind: "ok", hit: { allowed: false, layer: 1, limit: 2 } });
    const mine = await limiter.peek(userSubject(three.userId), { category: "general", rule: userRule });
    expect(mine[0]).toMatchObject({ used: 2 });
    expect((await limiter.peek(ip.subject, { category: "ip", rule: ipRule }))[0]).toMatchObject({ used: 1 });
  });

  it("creates a user whose name was left claimed for good by a user that no longer exists", async () => {
    const prefix = testPrefix();
    const keys = createKeys(prefix);
    const store = createRedisStore({ redis: cluster, prefix });
    // A permanent claim whose user hash (another master) is gone: a deletion that failed half-way.
    await cluster.set(keys.username("halfway"), "usr_00000000deadbeef");
    expect(await store.users.findByUsername("halfway")).toBeUndefined();
    const created = await store.users.create({ username: "halfway", tier: "pro", passwordHash: "x" });
    expect(created).not.toBe("exists");
    expect(await store.users.findByUsername("halfway")).toEqual(created);
    expect(await store.users.create({ username: "halfway", tier: "free", passwordHash: "y" })).toBe("exists");

    // USERS_FILE at start-up takes such a name over the same way.
    await cluster.set(keys.username("halfway-file"), "usr_00000000feedface");
    await syncUsersFile(
      fileTarget(store),
      [{ username: "halfway-file", tier: "free", password: "z-password" }],
      silent,
    );
    const fromFile = await store.users.findByUsername("halfway-file");
    expect(fromFile).toMatchObject({ username: "halfway-file", tier: "free", source: "file" });
    expect(fromFile?.id).not.toBe("usr_00000000feedface");
    expect(await store.users.any()).toBe(true);
  });

  it("lets exactly one of twenty concurrent creations take over an abandoned name", async () => {
    const prefix = testPrefix();
    const keys = createKeys(prefix);
    const store = createRedisStore({ redis: cluster, prefix });
    await cluster.set(keys.username("contested"), "usr_00000000abandon0");
    const results = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        store.users.create({ username: "contested", tier: "free", passwordHash: `h${i}` }),
      ),
    );
    const winners = results.filter((r) => r !== "exists");
    expect(winners).toHaveLength(1);
    expect(await store.users.findByUsername("contested")).toEqual(winners[0]);
  });

  it("frees a name whose creation died half-way once its claim's lease runs out", async () => {
    const prefix = testPrefix();
    const keys = createKeys(prefix);
    const store = createRedisStore({ redis: cluster, prefix });
    // The claim of a creation that never wrote its hash nor confirmed: still a lease (here 300 ms).
    await cluster.set(keys.username("leased"), "usr_00000000deadlea5", "PX", 300);
    expect(await store.users.create({ username: "leased", tier: "free", passwordHash: "x" })).toBe("exists");
    await new Promise((resolve) => setTimeout(resolve, 400));
    const created = await store.users.create({ username: "leased", tier: "free", passwordHash: "x" });
    expect(created).not.toBe("exists");
    expect(await store.users.findByUsername("leased")).toEqual(created);
    expect(await cluster.pttl(keys.username("leased"))).toBe(-1);
  });

  it("creates a USERS_FILE user whose name a creation that died still held, once that claim runs out", async () => {
    const prefix = testPrefix();
    const keys = createKeys(prefix);
    const store = createRedisStore({ redis: cluster, prefix });
    // A start-up killed half-way through this user's creation, just before this one began.
    await cluster.set(keys.username("restarted"), "usr_00000000dead5747", "PX", 600);
    await syncUsersFile(
      fileTarget(store),
      [{ username: "restarted", tier: "pro", password: "r-password" }],
      silent,
    );
    expect(await store.users.findByUsername("restarted")).toMatchObject({ tier: "pro", source: "file" });
  });

  it("never lets two processes' creations of one name both succeed, however their steps interleave", async () => {
    const prefix = testPrefix();
    const keys = createKeys(prefix);
    // Process A's claim lands, its hash 50 ms later. Process B tries the same name meanwhile and
    // finds A's claim with no user behind it yet; a takeover by B, should it try one, lands only
    // after A has checked its claim.
    const a = createRedisStore({ redis: delaying(connectTopology("cluster"), "hset", 50), prefix });
    const b = createRedisStore({ redis: delaying(connectTopology("cluster"), "nameTakeover", 100), prefix });
    const first = a.users.create({ username: "raced", tier: "free", passwordHash: "a" });
    await new Promise((resolve) => setTimeout(resolve, 10));
    const second = b.users.create({ username: "raced", tier: "pro", passwordHash: "b" });
    const winners = (await Promise.all([first, second])).filter((r) => r !== "exists");
    expect(winners).toHaveLength(1);
    expect(await b.users.findByUsername("raced")).toEqual(winners[0]);
    const named = (await b.users.list({ limit: 100 })).users.filter((u) => u.username === "raced");
    expect(named).toEqual(winners);
    expect(await cluster.pttl(keys.username("raced"))).toBe(-1);
    await Promise.all([a.close(), b.close()]);
  });

  it("leaves no user that the listing misses, whichever step of its creation fails", async () => {
    const prefix = testPrefix();
    const store = createRedisStore({ redis: cluster, prefix });
    const listed = async (): Promise<string[]> => {
      const ids: string[] = [];
      for await (const user of allUsers(store.users)) ids.push(user.id);
      return ids;
    };
    for (const step of ["nameClaim", "zadd", "hset", "nameConfirm", "del"]) {
      const broken = createRedisStore({ redis: failing(cluster, step), prefix });
      const username = `broken_${step}`;
      await expect(broken.users.create({ username, tier: "free", passwordHash: "x" })).rejects.toThrow();
      const user = await store.users.findByUsername(username);
      if (user !== undefined) expect(await listed(), step).toContain(user.id);
    }
  });

  it("remembers a deletion for USERS_FILE, whichever step of it fails", async () => {
    const prefix = testPrefix();
    const store = createRedisStore({ redis: cluster, prefix });
    for (const step of ["userDelete", "zrem", "usernameRelease", "set"]) {
      const username = `doomed_${step}`;
      const user = await store.users.create({ username, tier: "free", passwordHash: "x", source: "file" });
      if (user === "exists") throw new Error("a fresh name");
      const broken = createRedisStore({ redis: failing(cluster, step), prefix });
      await expect(broken.users.remove(user.id)).rejects.toThrow();
      // Either the user is still there (the deletion can be tried again) or it stays deleted.
      if ((await store.users.get(user.id)) === undefined) {
        await syncUsersFile(fileTarget(store), [{ username, tier: "free", password: "x-password" }], silent);
        expect(await store.users.findByUsername(username), step).toBeUndefined();
      }
    }
  });

  it("spreads the keys of 10,000 users over all three masters", async () => {
    const prefix = testPrefix();
    const store = createRedisStore({ redis: cluster, prefix });
    const keys = createKeys(prefix);
    const ids = Array.from({ length: 10_000 }, (_, i) => `usr_${i.toString(16).padStart(16, "0")}`);
    // In batches small enough that each creation answers within the store's API deadline on a busy machine.
    for (let i = 0; i < ids.length; i += 100) {
      await Promise.all(
        ids.slice(i, i + 100).map((id, j) =>
          store.users.create({
            id,
            username: `spread_${i + j}_${prefix}`,
            tier: "free",
            passwordHash: "x",
          }),
        ),
      );
    }
    const perMaster = new Map<string, number>();
    for (const node of cluster.nodes("master")) {
      let count = 0;
      let cursor = "0";
      do {
        const [next, found] = await node.scan(cursor, "MATCH", `${prefix}{u:*}:user`, "COUNT", 1000);
        count += found.length;
        cursor = next;
      } while (cursor !== "0");
      perMaster.set(`${node.options.host}:${node.options.port}`, count);
    }
    const counts = [...perMaster.values()];
    console.log(`10,000 users over the masters: ${[...perMaster].map(([n, c]) => `${n}=${c}`).join(" ")}`);
    expect(counts.reduce((a, b) => a + b, 0)).toBe(10_000);
    // 16384 slots split about evenly: each master holds about a third, far from all or nothing.
    for (const count of counts) expect(count).toBeGreaterThan(2_800);
    expect(await store.users.findByUsername(`spread_9999_${prefix}`)).toMatchObject({ id: ids[9_999] });
    expect(keys.user(ids[0] as string)).toContain("{u:");
  }, 120_000);
});
