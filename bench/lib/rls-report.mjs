// The rate limit service's part of the report: its rows beside the gRPC ceiling, the gRPC ext_authz
// allowed row and the fixed-window floor, per call and per descriptor, and its targets.
import {
  expectedFraction,
  failedCalls,
  fixed,
  grpcExpectedFraction,
  percent,
  table,
  thousands,
} from "./report.mjs";

/** p99 of a ShouldRateLimit call at the bench's streams: well inside Envoy's 20 ms rate limit timeout. */
export const RLS_P99_MS = 5;
/**
 * Commands every tollgate on the bench's Redis sends once a second whatever the load (redis-stats.mjs):
 * PING, and its invalidations heartbeat, an FCALL of peerBeat-2.lua that runs TIME, ZREMRANGEBYSCORE,
 * ZADD, ZRANGE, PEXPIREAT twice (the list and the count), GET and PUBLISH. Checks run FCALL, TIME and
 * PEXPIRE too, so a heartbeat is counted by its ZREMRANGEBYSCORE, which nothing else runs: each stands
 * for its heartbeat's FCALL, TIME, ZADD, ZRANGE, two PEXPIREATs and GET as well (its PUBLISH is counted
 * with the others').
 */
const upkeepOf = ({ byCommand }) =>
  (byCommand.ping ?? 0) + (byCommand.publish ?? 0) + 8 * (byCommand.zremrangebyscore ?? 0);

const rlsRowsOf = (byId) => Object.values(byId).filter((row) => row.rls !== undefined);

/** Redis commands per call (those run inside a script included), less every process's upkeep. */
export function commandsPerCall(row) {
  return (row.redis.all - upkeepOf(row.redis)) / row.redis.requests;
}

const upkeepPerCall = (row) => upkeepOf(row.redis) / row.redis.requests;
const perDescriptor = (row, value) => value / (row.rls?.descriptors ?? 1);
const redisCpuPerDescriptor = (row) => perDescriptor(row, row.redis.cpuUsPerRequest);

/** Lines of the report: the RLS rows' table, or one line when they were skipped. */
export function rlsTable(byId, { skipped }) {
  if (skipped !== undefined) return [`Rate limit service rows: skipped (${skipped}).`];
  const extAuthz = byId["grpc-allowed"];
  const rows = [byId["grpc-ceiling"], extAuthz, ...rlsRowsOf(byId)].filter((row) => row !== undefined);
  return [
    "Rate limit service (ShouldRateLimit on the RLS tollgate: RLS_CONFIG=bench/rls-config, denial cache on), beside the gRPC " +
      "ceiling, the gRPC ext_authz allowed row and the fixed-window floor (a node client, pipelined INCRBY + EXPIRE per call, " +
      "the reference's Redis work per descriptor). CPU: the serving process's per call (the floor: its client's). Redis " +
      "commands: those run inside scripts included, the once-a-second upkeep of every tollgate on this Redis (PING, the invalidations heartbeat) left out.",
    "",
    table(
      [
        "row",
        "calls/s",
        "descriptors/s",
        "calls/s vs gRPC ext_authz allowed",
        "CPU µs/call",
        "Redis CPU µs/call",
        "Redis CPU µs/descriptor",
        "Redis cmds/descriptor",
        "script calls/call",
        "p50 ms",
        "p99 ms",
        "answers",
        "other processes",
      ],
      rows.map((row) => [
        row.short,
        thousands(row.load.rps),
        thousands(row.load.rps * (row.rls?.descriptors ?? 1)),
        row.rls === undefined || row.rls.floor ? "—" : `${fixed(row.load.rps / extAuthz.load.rps, 2)}×`,
        fixed(row.serverCpuUsPerRequest, 0),
        row.redis === undefined ? "—" : fixed(row.redis.cpuUsPerRequest, 1),
        row.redis === undefined ? "—" : fixed(redisCpuPerDescriptor(row), 1),
        row.redis === undefined ? "—" : fixed(perDescriptor(row, commandsPerCall(row)), 3),
        row.redis === undefined ? "—" : fixed(row.redis.scriptCallsPerRequest, 3),
        fixed(row.load.p50, 2),
        fixed(row.load.p99, 2),
        row.rls === undefined
          ? percent(expectedFraction(row), 2)
          : row.rls.floor
            ? `${thousands(row.load.requests)} calls, ${row.load.errors} errors`
            : `${percent(grpcExpectedFraction(row), 2)} ${row.grpc.expectOutcome}`,
        row.cpu === undefined ? "—" : percent(row.cpu.others, 0),
      ]),
    ),
  ];
}

/** The rate limit service's targets, when its rows ran. */
export function rlsTargets(byId) {
  const fixedOne = byId["rls-allowed-fixed"];
  const floor = byId["rls-floor"];
  const extAuthz = byId["grpc-allowed"];
  if (fixedOne === undefined || floor === undefined || extAuthz === undefined) return [];
  const served = rlsRowsOf(byId).filter((row) => !row.rls.floor);
  const allowed = served.filter((row) => row.rls.expectOverall === 1);
  const denied = served.filter((row) => row.rls.expectOverall === 2);
  const judgedCpu = allowed.filter((row) => row.rls.algorithm === "fixed-window");
  const others = served.map((row) => row.cpu?.others ?? Number.NaN);
  const notOk = (row) => {
    const { failed, cancelled, inFlight } = failedCalls(row);
    return { failed, cancelled, inFlight, ok: failed === 0 && cancelled <= inFlight };
  };
  return [
    {
      target: "RLS one-descriptor fixed-window calls/s ≥ 0.9× the gRPC ext_authz allowed row's",
      figure:
        `${fixed(fixedOne.load.rps / extAuthz.load.rps, 2)}× (${thousands(fixedOne.load.rps)} vs ${thousands(extAuthz.load.rps)} calls/s); ` +
        `CPU per call ${fixed(fixedOne.serverCpuUsPerRequest, 0)} vs ${fixed(extAuthz.serverCpuUsPerRequest, 0)} µs`,
      met: fixedOne.load.rps >= 0.9 * extAuthz.load.rps,
    },
    {
      target:
        "RLS Redis CPU per descriptor ≤ the fixed-window floor's (judged on the fixed-window rows; the others reported)",
      figure:
        `floor ${fixed(redisCpuPerDescriptor(floor), 1)} µs (${fixed(commandsPerCall(floor), 2)} commands); ` +
        allowed
          .map(
            (row) =>
              `${row.short.replace("RLS ", "")} ${fixed(redisCpuPerDescriptor(row), 1)} µs ` +
              `(${fixed(perDescriptor(row, commandsPerCall(row)), 2)} commands)`,
          )
          .join(", "),
      met: judgedCpu.every((row) => redisCpuPerDescriptor(row) <= redisCpuPerDescriptor(floor)),
    },
    {
      target: "RLS denied descriptors: 0 Redis commands per call (the denial cache), every algorithm",
      figure:
        denied.map((row) => `${row.rls.algorithm} ${fixed(commandsPerCall(row), 4)}`).join(", ") +
        ` (upkeep meanwhile: ${denied.map((row) => fixed(upkeepPerCall(row), 4)).join(" / ")} PING + heartbeat commands per call, every tollgate's)`,
      met: denied.every((row) => commandsPerCall(row) === 0),
    },
    {
      target: `RLS p99 at ${fixedOne.grpc.streams} streams < ${RLS_P99_MS} ms (Envoy's rate limit timeout: 20 ms), every RLS row`,
      figure:
        served.map((row) => `${row.short.replace("RLS ", "")} ${fixed(row.load.p99, 2)}`).join(", ") +
        ` ms; other processes took ${percent(Math.min(...others), 0)}–${percent(Math.max(...others), 0)} of the machine during these rows`,
      met: served.every((row) => row.load.p99 < RLS_P99_MS),
    },
    {
      target:
        "(bench sanity) RLS rows: every answer HTTP 200, every descriptor's result the expected one, no call failed; the floor without errors",
      figure:
        `HTTP 200 ${served.map((row) => percent(expectedFraction(row), 3)).join(" / ")}; ` +
        `expected results ${served.map((row) => percent(grpcExpectedFraction(row), 3)).join(" / ")}; ` +
        `calls failed ${served.map((row) => notOk(row).failed).join(" / ")}, cancelled by h2load at slice ends ` +
        `${served.map((row) => `${notOk(row).cancelled} of at most ${notOk(row).inFlight}`).join(" / ")}; floor errors ${floor.load.errors}`,
      met:
        served.every(
          (row) => expectedFraction(row) === 1 && grpcExpectedFraction(row) === 1 && notOk(row).ok,
        ) && floor.load.errors === 0,
    },
  ];
}
