// The bench's rate limit service rows: their configuration (bench/rls-config, which the allowed rows
// must never fill and the denied rows must) and how the report judges them (bench/lib/rls-report.mjs).
import { describe, expect, it } from "vitest";
import { commandsPerCall, type RlsReportRow, rlsTargets } from "../../bench/lib/rls-report.mjs";
import { loadRlsConfig } from "../../src/rls/load.js";

const ALGORITHMS = { fixed: "fixed-window", log: "sliding-log", counter: "sliding-counter", gcra: "gcra" };

describe("bench/rls-config", () => {
  const domain = loadRlsConfig("bench/rls-config", { defaultAlgorithm: "fixed-window" }).domains.get("bench");

  it("allowed keys: a limit no row reaches (100,000 calls/s for a whole window), one per algorithm", () => {
    for (const [name, algorithm] of Object.entries(ALGORITHMS)) {
      const limit = domain?.root.defaults.get(`alg_${name}`)?.limit;
      expect(limit?.algorithm).toBe(algorithm);
      expect(limit?.requestsPerUnit).toBeGreaterThanOrEqual((100_000 * (limit?.windowMs ?? 0)) / 1000);
    }
  });

  it("denied keys: one hit a day, so the cache answers every later call", () => {
    for (const [name, algorithm] of Object.entries(ALGORITHMS)) {
      const limit = domain?.root.defaults.get(`denied_${name}`)?.limit;
      expect(limit).toMatchObject({ algorithm, requestsPerUnit: 1, windowMs: 86_400_000 });
    }
  });
});

type RowFields = {
  short: string;
  calls: number;
  byCommand: Record<string, number>;
  redisCpuUs: number;
  rls?: RlsReportRow["rls"];
  expectOutcome?: string;
};

/** A row as the bench's combine() makes it, as far as the RLS report reads it. */
function row(id: string, { short, calls, byCommand, redisCpuUs, rls, expectOutcome = "within" }: RowFields) {
  return {
    id,
    short,
    expected: 200,
    serverCpuUsPerRequest: 80,
    cpu: { others: 0.1 },
    load: { rps: 10_000, p50: 1, p99: 3, requests: calls, errors: 0, statuses: { 200: calls }, slices: 2 },
    grpc: { streams: 64, expectOutcome },
    outcomes: { decisions: { [expectOutcome]: calls }, calls: { "…/ShouldRateLimit OK": calls } },
    redis: {
      requests: calls,
      all: Object.values(byCommand).reduce((a, b) => a + b, 0),
      byCommand,
      cpuUsPerRequest: redisCpuUs,
      scriptCallsPerRequest: (byCommand.fcall ?? 0) / calls,
    },
    ...(rls === undefined ? {} : { rls }),
  } satisfies RlsReportRow;
}

describe("the RLS targets", () => {
  // Every tollgate on the bench's Redis, once a second each, whatever the load: a PING, and a
  // heartbeat (peerBeat-2.lua: FCALL, TIME, ZREMRANGEBYSCORE, ZADD, ZRANGE, PEXPIREAT twice, GET, PUBLISH).
  const beats = 6;
  const withUpkeep = (commands: Record<string, number>): Record<string, number> => {
    const all: Record<string, number> = { ...commands, ping: 12 };
    for (const name of ["fcall", "time", "zremrangebyscore", "zadd", "zrange", "pexpireat", "get", "publish"])
      all[name] = (all[name] ?? 0) + beats;
    all.pexpireat = (all.pexpireat ?? 0) + beats;
    return all;
  };
  const byId = {
    "grpc-allowed": row("grpc-allowed", {
      short: "gRPC allowed",
      calls: 1000,
      byCommand: { fcall: 1000 },
      redisCpuUs: 13,
    }),
    "rls-allowed-fixed": row("rls-allowed-fixed", {
      short: "RLS allowed, fixed",
      calls: 1000,
      byCommand: withUpkeep({ fcall: 1000, time: 1000, hmget: 1000, hset: 1000 }),
      redisCpuUs: 10.5,
      rls: { descriptors: 1, algorithm: "fixed-window", expectOverall: 1 },
    }),
    "rls-three-fixed": row("rls-three-fixed", {
      short: "RLS 3 descriptors, fixed",
      calls: 1000,
      byCommand: withUpkeep({ fcall: 1000, hmget: 3000 }),
      redisCpuUs: 30,
      rls: { descriptors: 3, algorithm: "fixed-window", expectOverall: 1 },
    }),
    "rls-denied-fixed": row("rls-denied-fixed", {
      short: "RLS denied, fixed",
      calls: 1000,
      byCommand: withUpkeep({}),
      redisCpuUs: 0.1,
      rls: { descriptors: 1, algorithm: "fixed-window", expectOverall: 2 },
      expectOutcome: "cached",
    }),
    "rls-floor": row("rls-floor", {
      short: "RLS fixed-window floor",
      calls: 1000,
      byCommand: withUpkeep({ incrby: 1000, expire: 1000 }),
      redisCpuUs: 11,
      rls: { descriptors: 1, algorithm: "fixed-window (INCRBY + EXPIRE)", floor: true },
    }),
  };

  it("commands per call leave out every process's upkeep (PING, the heartbeat's commands)", () => {
    expect(commandsPerCall(byId["rls-denied-fixed"])).toBe(0);
    expect(commandsPerCall(byId["rls-floor"])).toBe(2);
    expect(commandsPerCall(byId["rls-allowed-fixed"])).toBe(4);
  });

  it("Redis CPU is judged per descriptor: three descriptors at 30 µs a call are 10 µs each", () => {
    const targets = rlsTargets(byId);
    const verdict = (start: string) => targets.find((t) => t.target.startsWith(start));
    expect(verdict("RLS Redis CPU per descriptor")).toMatchObject({ met: true });
    expect(verdict("RLS Redis CPU per descriptor")?.figure).toContain(
      "3 descriptors, fixed 10.0 µs (1.33 commands)",
    );
    expect(verdict("RLS denied descriptors")?.met).toBe(true);
    expect(verdict("RLS one-descriptor fixed-window")?.met).toBe(true);
    expect(verdict("RLS p99")?.met).toBe(true);
    expect(verdict("(bench sanity) RLS rows")?.met).toBe(true);
    // h2load leaves at most its streams in flight at each slice's end (2 slices × 64 here).
    const sanity = () => rlsTargets(byId).find((t) => t.target.startsWith("(bench sanity) RLS rows"))?.met;
    const calls: Record<string, number> = byId["rls-allowed-fixed"].outcomes.calls;
    calls["…/ShouldRateLimit CANCELLED"] = 128;
    expect(sanity()).toBe(true);
    calls["…/ShouldRateLimit CANCELLED"] = 129;
    expect(sanity()).toBe(false);
    delete calls["…/ShouldRateLimit CANCELLED"];
    calls["…/ShouldRateLimit UNAVAILABLE"] = 1;
    expect(sanity()).toBe(false);
    delete calls["…/ShouldRateLimit UNAVAILABLE"];
    byId["rls-three-fixed"].redis.cpuUsPerRequest = 36;
    expect(rlsTargets(byId).find((t) => t.target.startsWith("RLS Redis CPU per descriptor"))?.met).toBe(
      false,
    );
  });
});
