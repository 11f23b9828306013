// A check (or a login) that stopped waiting on a stalled Redis: what the call counts when Redis runs
// it late. A request refused without the store's answer (503) is never recorded; one allowed
// degraded passed, and counts once Redis gets to it.
import { fileURLToPath } from "node:url";
import type { Cluster, Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import type { Tollgate } from "../../src/app.js";
import type { Decision } from "../../src/check/types.js";
import { GrpcError, GrpcStatus } from "../../src/frontends/envoy-grpc/grpc-protocol.js";
import type { RlsMatch } from "../../src/frontends/envoy-grpc/rls.js";
import { OK } from "../../src/frontends/envoy-grpc/rls-answer.js";
import type { RlsAnswer } from "../../src/frontends/envoy-grpc/rls-codec.js";
import { rlsRules } from "../../src/frontends/envoy-grpc/rls-rules.js";
import { logRule, usernameSubject } from "../../src/ratelimit/types.js";
import type { RlsState } from "../../src/rls/state.js";
import { createRedisClient } from "../../src/store/redis/client.js";
import { createRedisStore, type Store } from "../../src/store/store.js";
import { type DarkProxy, startDarkProxy } from "../support/dark-proxy.js";
import { demoToken, type InProcess, sleep, startInProcess } from "../support/in-process.js";
import { type RedisServer, startRedisServer } from "../support/processes.mjs";
import { connectRedis, connectTopology, testPrefix } from "../support/redis.js";

let server: RedisServer;
let redis: Redis;
let pauser: Redis;
let store: Store;
const instances: InProcess[] = [];
let open: Tollgate;
let closed: Tollgate;

beforeAll(async () => {
  // A Redis of its own: the pauses would stall every other test file on the shared one. The client
  // is made as tollgate makes its own (no offline queue).
  server = await startRedisServer();
  redis = createRedisClient({ url: server.url });
  store = createRedisStore({ redis, prefix: "tg:" });
  expect(await store.connected(5_000)).toBe(true);
  pauser = connectRedis(server.url);
  for (const mode of ["open", "closed"]) {
    const env = { LOG_LEVEL: "silent", FAILURE_MODE: mode, REDIS_TIMEOUT_MS: "100" };
    // The demo users are loaded once, by the first.
    instances.push(await startInProcess({ store, demoUsers: mode === "open", env }));
  }
  [open, closed] = instances.map((i) => i.tollgate) as [Tollgate, Tollgate];
});

afterAll(async () => {
  for (const instance of instances) await instance.close();
  pauser.disconnect();
  await store.close();
  await server.stop();
});

const usedOf = (d: Decision): number | undefined => (d.kind === "allow" ? d.limit?.used : undefined);
const summary = (d: Decision): string =>
  d.kind === "allow" ? `allow${d.degraded ? " degraded" : ""}` : `deny ${d.status}`;

/** Pauses Redis's writes (every limit script call) for `ms`; resolves once the pause has ended and its backlog ran. */
async function duringPause(ms: number, run: () => Promise<void>): Promise<void> {
  const until = Date.now() + ms;
  expect(await pauser.call("CLIENT", "PAUSE", String(ms), "WRITE")).toBe("OK");
  await run();
  await sleep(Math.max(0, until - Date.now()) + 300);
}

/**
 * One check before a stall, `count` at once during it (each answered `during`), one after: what the
 * window holds after it (the first and the last check count 1 each).
 */
async function acrossStall(
  check: () => Decision | Promise<Decision>,
  count: number,
  during: string,
): Promise<number | undefined> {
  const before = await check();
  expect([summary(before), usedOf(before)]).toEqual(["allow", 1]);
  await duringPause(600, async () => {
    const answers = await Promise.all(Array.from({ length: count }, check));
    expect(answers.map(summary)).toEqual(answers.map(() => during));
  });
  const after = await check();
  expect(summary(after)).toBe("allow");
  return usedOf(after);
}

describe("a check answered without the store while Redis stalls", () => {
  it("in closed mode, answered 503, is not counted once Redis runs it late", async () => {
    const token = await demoToken(closed.auth, "alice");
    const check = () =>
      closed.checker({
        method: "GET",
        path: "/api/orders",
        authorization: `Bearer ${token}`,
        ip: "192.0.2.31",
      });
    // orders: 10 an hour for a free user, so that every count shows.
    expect(await acrossStall(check, 5, "deny 503")).toBe(2);
  });

  it("in open mode, answered 503 on a limited route without a token (login), is not counted either", async () => {
    const check = () =>
      open.checker({ method: "POST", path: "/auth/login", authorization: undefined, ip: "192.0.2.32" });
    expect(await acrossStall(check, 4, "deny 503")).toBe(2);
  });

  it("in open mode, allowed degraded, counts once Redis runs it: the request did pass", async () => {
    const token = await demoToken(open.auth, "bob_pro");
    const check = () =>
      open.checker({
        method: "GET",
        path: "/api/orders",
        authorization: `Bearer ${token}`,
        ip: "192.0.2.33",
      });
    expect(await acrossStall(check, 3, "allow degraded")).toBe(5);
  });
});

describe("a login answered 503 while Redis stalls", () => {
  it("leaves no failed attempt against the username once Redis runs its count late", async () => {
    const lockout = { category: "login_failed", rule: logRule(10, 15 * 60_000) };
    const failures = async () => (await store.limiter.peek(usernameSubject("ent_carol"), lockout))[0]?.used;
    expect(await failures()).toBe(0);
    const api = instances[0] as InProcess;
    // Longer than the APIs' deadline (1 s at REDIS_TIMEOUT_MS=100).
    await duringPause(1_500, async () => {
      const reply = await api.login("ent_carol", "wrong password");
      expect([reply.status, (reply.body as { error?: string }).error]).toEqual([503, "unavailable"]);
    });
    expect(await failures()).toBe(0);
    // A real failure still counts.
    expect((await api.login("ent_carol", "wrong password")).status).toBe(401);
    expect(await failures()).toBe(1);
  });
});

describe("a check refused while Redis stalls longer than the client's own command timer", () => {
  it("is still not counted: the limiter's calls wait for Redis's late answer, whatever that timer says", async () => {
    // A client whose backstop timer (commandTimeout) fires long before Redis resumes.
    const client = createRedisClient({ url: server.url, commandTimeoutMs: 200 });
    const shortStore = createRedisStore({ redis: client, prefix: "tg:" });
    expect(await shortStore.connected(5_000)).toBe(true);
    const instance = await startInProcess({
      store: shortStore,
      demoUsers: false,
      env: { LOG_LEVEL: "silent", FAILURE_MODE: "closed", REDIS_TIMEOUT_MS: "100" },
    });
    try {
      const token = await demoToken(instance.tollgate.auth, "alice");
      const check = () =>
        instance.tollgate.checker({
          method: "GET",
          path: "/api/orders",
          authorization: `Bearer ${token}`,
          ip: "192.0.2.34",
        });
      const before = await check();
      expect(summary(before)).toBe("allow");
      await duringPause(800, async () => {
        const refused = await Promise.all(Array.from({ length: 3 }, check));
        expect(refused.map(summary)).toEqual(refused.map(() => "deny 503"));
      });
      const after = await check();
      expect([summary(after), usedOf(after)]).toEqual(["allow", (usedOf(before) ?? 0) + 1]);
    } finally {
      await instance.close();
      await shortStore.close();
    }
  });
});

/** The RLS configuration of these tests: one descriptor per algorithm, counted each or all or none. */
const RLS_CONFIG = fileURLToPath(new URL("../fixtures/rls/late/", import.meta.url));
const ALGORITHMS = ["fw", "slog", "scount", "gcra"];
/** Every descriptor's limit there: 100 a day. */
const LIMIT = 100;

const NO_CREDENTIALS = { username: undefined, password: undefined, tls: false, sentinelPassword: undefined };

type Hits = readonly (readonly [key: string, value: string, hits: number])[];

/** ShouldRateLimit of `descriptors` (one entry each) as the gRPC method decides it. */
function rlsCall(tollgate: Tollgate, domain: string, descriptors: Hits): Promise<RlsAnswer> {
  const decide = tollgate.rls?.decide;
  if (decide === undefined) throw new Error("no RLS_CONFIG");
  return Promise.resolve().then(() =>
    decide({
      domain,
      descriptors: descriptors.map(([key, value]) => ({ entries: [{ key, value }], limit: undefined })),
      addends: descriptors.map(([, , hits]) => hits),
      requestId: undefined,
    }),
  );
}

async function eventually<T>(probe: () => Promise<T>, ok: (value: T) => boolean, ms: number): Promise<T> {
  const until = Date.now() + ms;
  for (;;) {
    const value = await probe();
    if (ok(value) || Date.now() > until) return value;
    await sleep(50);
  }
}

/** What each descriptor has used, looked at with a hit of 0. */
async function usedOfRls(tollgate: Tollgate, domain: string, descriptors: Hits): Promise<number[]> {
  const look = await rlsCall(
    tollgate,
    domain,
    descriptors.map(([key, value]) => [key, value, 0] as const),
  );
  return look.statuses.map((s) => LIMIT - s.limit_remaining);
}

const statusOf = (settled: PromiseSettledResult<RlsAnswer>): string =>
  settled.status === "fulfilled"
    ? `answered ${settled.value.overall_code}`
    : settled.reason instanceof GrpcError && settled.reason.code === GrpcStatus.UNAVAILABLE
      ? "UNAVAILABLE"
      : String(settled.reason);

describe("a rate limit call answered UNAVAILABLE while Redis stalls", () => {
  let rls: InProcess;
  beforeAll(async () => {
    rls = await startInProcess({
      store,
      demoUsers: false,
      env: { LOG_LEVEL: "silent", RLS_CONFIG, RLS_TIMEOUT_MS: "250" },
    });
  });
  afterAll(async () => {
    await rls.close();
  });

  for (const domain of ["late", "late-aon"]) {
    it(`is not counted once Redis runs it late, in any algorithm, whatever its hits (${domain})`, async () => {
      const value = Math.random().toString(36).slice(2);
      const each = ALGORITHMS.map((key) => [key, value, 1] as const);
      const call = (descriptors: Hits) => rlsCall(rls.tollgate, domain, descriptors);
      expect((await call(each)).overall_code).toBe(OK);
      expect(await usedOfRls(rls.tollgate, domain, each)).toEqual([1, 1, 1, 1]);
      const late: Hits[] = [
        // One store call of 3 hits for the four.
        each.map(([key]) => [key, value, 3] as const),
        // Descriptors' own hits_addend: a store call per addend (all_or_none refuses them unequal).
        ...(domain === "late" ? [each.map(([key], i) => [key, value, 2 + i] as const)] : []),
        // A descriptor repeated: its repeat in a later store call.
        ...(domain === "late" ? [[...each, each[0] as Hits[number]]] : []),
      ];
      await duringPause(600, async () => {
        const settled = await Promise.allSettled(late.map(call));
        expect(settled.map(statusOf)).toEqual(late.map(() => "UNAVAILABLE"));
      });
      // Redis ran every late call and took each back; the calls answered in time stay counted.
      expect(await usedOfRls(rls.tollgate, domain, each)).toEqual([1, 1, 1, 1]);
      expect((await call(each)).overall_code).toBe(OK);
      expect(await usedOfRls(rls.tollgate, domain, each)).toEqual([2, 2, 2, 2]);
    });
  }
});

describe("a rate limit call answered UNAVAILABLE on a Redis Cluster, one master's answers late", () => {
  let proxies: DarkProxy[];
  let clusterStore: Store;
  let rls: InProcess;
  let slow: DarkProxy;
  /** Per algorithm, a descriptor value counted on a master that answers in time, and one on the late one. */
  // Per domain: a descriptor's subject (its keys' hash tag) names its domain, so one value lands on
  // different masters in "late" and "late-aon".
  const prompt: Record<string, string[]> = {};
  const tardy: Record<string, string[]> = {};

  beforeAll(async () => {
    // A proxy in front of every node of the shared cluster, so that one master's replies can be
    // delayed for this client alone; the client is made as tollgate makes its own.
    const seeds = inject("clusterNodes")
      .split(",")
      .map((seed) => {
        const [host, port] = seed.split(":");
        return { host: host as string, port: Number(port) };
      });
    proxies = await Promise.all(seeds.map((seed) => startDarkProxy(seed)));
    const portOf = (proxy: DarkProxy) => Number(new URL(proxy.url).port);
    const natMap = Object.fromEntries(
      seeds.map((seed, i) => [
        `${seed.host}:${seed.port}`,
        { host: "127.0.0.1", port: portOf(proxies[i] as DarkProxy) },
      ]),
    );
    const nodes = proxies.map((proxy) => ({ host: "127.0.0.1", port: portOf(proxy) }));
    const settings = { topology: { kind: "cluster" as const, nodes }, ...NO_CREDENTIALS };
    clusterStore = createRedisStore({ redis: createRedisClient({ settings, natMap }), prefix: testPrefix() });
    expect(await clusterStore.connected(5_000)).toBe(true);
    rls = await startInProcess({
      store: clusterStore,
      demoUsers: false,
      env: { LOG_LEVEL: "silent", RLS_CONFIG, RLS_TIMEOUT_MS: "250" },
    });
    // Which master counts each descriptor value: its subject is its keys' hash tag.
    const plain = connectTopology("cluster") as Cluster;
    const ranges = (await plain.cluster("SLOTS")) as unknown as [number, number, [string, number]][];
    const masterOf = async (subject: string) => {
      const slot = Number(await plain.cluster("KEYSLOT", subject));
      return ranges.find(([from, to]) => slot >= from && slot <= to)?.[2][1] as number;
    };
    const rules = rlsRules(() => (rls.tollgate.rls as { state: RlsState }).state.current());
    const subjectOf = (domain: string, key: string, value: string) =>
      (rules().resolve(domain, [{ entries: [{ key, value }], limit: undefined }]).limits[0] as RlsMatch)
        .subject;
    const [late, other] = [ranges[0]?.[2][1], ranges[1]?.[2][1]];
    const run = Math.random().toString(36).slice(2);
    const valueOn = async (domain: string, key: string, master: number | undefined) => {
      for (let i = 0; ; i += 1)
        if ((await masterOf(subjectOf(domain, key, `${run}-${i}`))) === master) return `${run}-${i}`;
    };
    for (const domain of ["late", "late-aon"]) {
      prompt[domain] = await Promise.all(ALGORITHMS.map((key) => valueOn(domain, key, other)));
      tardy[domain] = await Promise.all(ALGORITHMS.map((key) => valueOn(domain, key, late)));
    }
    slow = proxies[seeds.findIndex((seed) => seed.port === late)] as DarkProxy;
    plain.disconnect();
    // The first calls connect to the masters (and may load the scripts there): past RLS_TIMEOUT_MS.
    const look = (domain: string) =>
      ALGORITHMS.flatMap((key, i) => [
        [key, prompt[domain]?.[i] as string, 0] as const,
        [key, tardy[domain]?.[i] as string, 0] as const,
      ]);
    for (let attempt = 0; ; attempt += 1) {
      const looks = await Promise.allSettled(
        ["late", "late-aon"].map((d) => rlsCall(rls.tollgate, d, look(d))),
      );
      if (looks.every((l) => l.status === "fulfilled") || attempt > 50) break;
      await sleep(100);
    }
  });
  afterAll(async () => {
    await rls?.close();
    await clusterStore?.close();
    await Promise.all((proxies ?? []).map((p) => p.close()));
  });

  for (const domain of ["late", "late-aon"]) {
    it(`is not counted, neither where it was answered in time nor where Redis answered late (${domain})`, async () => {
      const hits = (n: number): Hits =>
        ALGORITHMS.flatMap((key, i) => [
          [key, prompt[domain]?.[i] as string, n] as const,
          [key, tardy[domain]?.[i] as string, n] as const,
        ]);
      const call = (descriptors: Hits) => rlsCall(rls.tollgate, domain, descriptors);
      expect((await call(hits(1))).overall_code).toBe(OK);
      expect(await usedOfRls(rls.tollgate, domain, hits(1))).toEqual(hits(1).map(() => 1));
      // Far past RLS_TIMEOUT_MS: the proxy shares this process's event loop, so a loaded loop delays
      // the deadline too.
      slow.slowReplies(1_500, 1_500);
      try {
        const settled = await Promise.allSettled([call(hits(3))]);
        expect(settled.map(statusOf)).toEqual(["UNAVAILABLE"]);
      } finally {
        slow.slowReplies(0, 0);
      }
      // Every late answer came, and what it counted was taken back, with the calls answered in time.
      const used = () => usedOfRls(rls.tollgate, domain, hits(1)).catch(() => []);
      const ones = hits(1).map(() => 1);
      expect(await eventually(used, (u) => u.join() === ones.join(), 6_000)).toEqual(ones);
      expect((await call(hits(1))).overall_code).toBe(OK);
      expect(await usedOfRls(rls.tollgate, domain, hits(1))).toEqual(hits(1).map(() => 2));
    });
  }
});
