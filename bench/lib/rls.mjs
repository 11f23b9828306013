// The rate limit service rows: Envoy's ShouldRateLimit (envoy.service.ratelimit.v3.RateLimitService)
// against a tollgate of their own with RLS_CONFIG=bench/rls-config and its denial cache on, loaded by
// h2load as the gRPC Check rows are; and their fixed-window floor, a node client doing for each call
// what envoyproxy/ratelimit does in Redis per descriptor (bench/rls-floor-client.mjs).
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import { join } from "node:path";
import { messages } from "../../dist/src/frontends/envoy-grpc/protos.js";
import { ROOT } from "../../test/support/processes.mjs";
import { REAPED } from "./cpu.mjs";
import { grpcCall, writeBody } from "./grpc.mjs";
import { GRPC_HEADERS } from "./h2load.mjs";
import { benchTollgate } from "./services.mjs";

export const SHOULD_RATE_LIMIT = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
/** The runtime directory of the bench's RLS configuration (config/bench.yaml: the domain "bench"). */
export const RLS_CONFIG_DIR = join(ROOT, "bench", "rls-config");
const DOMAIN = "bench";
/** The process name of the RLS rows' tollgate, as the CPU table shows it. */
export const RLS_TOLLGATE = "tollgate (rls)";

/** RateLimitResponse.Code */
const OK = 1;
const OVER_LIMIT = 2;
const CODE_NAMES = { 0: "UNKNOWN", [OK]: "OK", [OVER_LIMIT]: "OVER_LIMIT" };

/** The algorithms, each with its descriptor keys in bench/rls-config/config/bench.yaml. */
export const RLS_ALGORITHMS = [
  { name: "fixed", algorithm: "fixed-window", limit: 4_294_967_295 },
  { name: "log", algorithm: "sliding-log", limit: 1_000_000 },
  { name: "counter", algorithm: "sliding-counter", limit: 4_294_967_295 },
  { name: "gcra", algorithm: "gcra", limit: 4_294_967_295 },
];

/** A RateLimitRequest of the domain "bench": one descriptor of one entry per [key, value]. */
export function rateLimitRequestBytes(descriptors) {
  const message = messages.RateLimitRequest.fromObject({
    domain: DOMAIN,
    descriptors: descriptors.map(([key, value]) => ({ entries: [{ key, value }] })),
  });
  return messages.RateLimitRequest.encode(message).finish();
}

/**
 * One call of an RLS row, answered as the row expects: HTTP 200, grpc-status OK, and a
 * RateLimitResponse whose overall code and every descriptor's code are the row's, each descriptor
 * with its configured limit (a descriptor that matched no limit would be answered OK without Redis).
 * A denied row's one hit a day is spent here if its window freed. Throws with what came back otherwise.
 */
export async function verifyRlsRow(spec) {
  const { rls } = spec;
  const target = new URL(spec.url);
  const body = readFileSync(spec.grpc.bodyFile);
  let response;
  // A denied row's first call in a fresh window is allowed (its one hit); the next is refused.
  for (let attempt = 0; attempt < (rls.expectOverall === OVER_LIMIT ? 2 : 1); attempt += 1) {
    const answer = await grpcCall(target.origin, target.pathname, body);
    const what = `HTTP ${answer.httpStatus}, grpc-status ${answer.grpcStatus} ${answer.grpcMessage}`.trim();
    if (answer.httpStatus !== 200 || answer.grpcStatus !== 0 || answer.message === undefined) {
      throw new Error(`preflight of "${spec.label}": the call failed (${what})`);
    }
    response = messages.RateLimitResponse.toObject(messages.RateLimitResponse.decode(answer.message), {
      defaults: true,
    });
    if (response.overall_code === rls.expectOverall) break;
  }
  const problems = [];
  if (response.overall_code !== rls.expectOverall)
    problems.push(`overall_code ${CODE_NAMES[response.overall_code] ?? response.overall_code}`);
  if (response.statuses.length !== rls.descriptors) problems.push(`${response.statuses.length} statuses`);
  for (const [i, status] of response.statuses.entries()) {
    if (status.code !== rls.expectOverall)
      problems.push(`descriptor ${i}: ${CODE_NAMES[status.code] ?? status.code}`);
    if (status.current_limit?.requests_per_unit !== rls.limit)
      problems.push(
        `descriptor ${i}: limit ${status.current_limit?.requests_per_unit ?? "none"}, expected ${rls.limit}`,
      );
  }
  if (problems.length > 0) {
    throw new Error(
      `preflight of "${spec.label}": expected ${CODE_NAMES[rls.expectOverall]} (${problems.join("; ")})`,
    );
  }
  return { code: response.overall_code };
}

/**
 * The RLS rows' tollgate (the bench's build, its Redis and key prefix, RLS_CONFIG, the denial cache on
 * as by default) and their request bodies; or why the rows are skipped. `grpc` is startGrpc's answer:
 * without h2load there are no gRPC rows, and no RLS rows either.
 */
export async function startRls(core, dir, grpc, options) {
  if (grpc.skipped !== undefined) return { skipped: grpc.skipped };
  const tollgate = await benchTollgate({
    redisUrl: core.redis.url,
    policyFile: join(dir, "policy.yaml"),
    main: options.tollgateMain,
    name: RLS_TOLLGATE,
    env: { RLS_CONFIG: RLS_CONFIG_DIR },
  });
  const bodies = {};
  const requestBytes = {};
  const add = (name, descriptors) => {
    const bytes = rateLimitRequestBytes(descriptors);
    bodies[name] = writeBody(dir, `rls-${name}`, bytes);
    requestBytes[name] = bytes.length;
  };
  for (const { name } of RLS_ALGORITHMS) {
    add(`allowed-${name}`, [[`alg_${name}`, "one"]]);
    add(`denied-${name}`, [[`denied_${name}`, "one"]]);
    add(
      `three-${name}`,
      [1, 2, 3].map((n) => [`alg_${name}`, `three-${n}`]),
    );
  }
  // A build that does not serve the rate limit service answers UNIMPLEMENTED (12).
  const probe = await grpcCall(tollgate.grpcUrl, SHOULD_RATE_LIMIT, readFileSync(bodies["allowed-fixed"]));
  if (probe.grpcStatus === 12) {
    return { skipped: `the tollgate under test does not serve ShouldRateLimit (${probe.grpcMessage})` };
  }
  return { tollgate, bodies, requestBytes };
}

/**
 * The RLS rows: allowed and denied (one descriptor) and three descriptors allowed, per algorithm,
 * and the fixed-window floor. None when the rows are skipped.
 */
export function rlsRows(core, { grpc, rls }) {
  if (rls.skipped !== undefined) return [];
  const { binary, connections, streams } = grpc;
  const load = `h2load, ${streams} streams over ${connections} connections`;
  const row = ({ id, short, label, body, descriptors, expectOverall, algorithm, limit }) => {
    const bodyFile = rls.bodies[body];
    const spec = {
      id,
      short,
      label: `${label} (${load}) → ${CODE_NAMES[expectOverall]}`,
      url: `${rls.tollgate.grpcUrl}${SHOULD_RATE_LIMIT}`,
      expected: 200,
      redis: true,
      tollgate: true,
      server: rls.tollgate,
      servers: [RLS_TOLLGATE],
      ceiling: "grpc-ceiling",
      h2load: { binary, bodyFile },
      headers: GRPC_HEADERS,
      grpc: {
        requestBytes: rls.requestBytes[body],
        streams,
        connections,
        bodyFile,
        // tollgate_rls_hits_total's result for every descriptor of the row.
        expectOutcome: expectOverall === OK ? "within" : "cached",
      },
      rls: { descriptors, expectOverall, algorithm, limit },
    };
    spec.preflight = () => verifyRlsRow(spec);
    return spec;
  };
  const rows = [];
  for (const { name, algorithm, limit } of RLS_ALGORITHMS) {
    rows.push(
      row({
        id: `rls-allowed-${name}`,
        short: `RLS allowed, ${name}`,
        label: `tollgate ShouldRateLimit, allowed: 1 descriptor, ${algorithm}, ${limit.toLocaleString("en-US")}/${name === "log" ? "1s" : "1m"}`,
        body: `allowed-${name}`,
        descriptors: 1,
        expectOverall: OK,
        algorithm,
        limit,
      }),
      row({
        id: `rls-denied-${name}`,
        short: `RLS denied, ${name}`,
        label: `tollgate ShouldRateLimit, denied: 1 descriptor, ${algorithm}, 1/day spent, from the denial cache`,
        body: `denied-${name}`,
        descriptors: 1,
        expectOverall: OVER_LIMIT,
        algorithm,
        limit: 1,
      }),
    );
  }
  for (const { name, algorithm, limit } of RLS_ALGORITHMS) {
    rows.push(
      row({
        id: `rls-three-${name}`,
        short: `RLS 3 descriptors, ${name}`,
        label: `tollgate ShouldRateLimit, allowed: 3 descriptors, ${algorithm}`,
        body: `three-${name}`,
        descriptors: 3,
        expectOverall: OK,
        algorithm,
        limit,
      }),
    );
  }
  rows.push({
    id: "rls-floor",
    short: "RLS fixed-window floor",
    label: `RLS fixed-window floor: a node client, pipelined INCRBY + EXPIRE per call (1 descriptor), ${streams} in flight → OK`,
    url: "(no server: bench/rls-floor-client.mjs)",
    expected: "ok",
    redis: true,
    // The client's own CPU per call, as the CPU table's exited children.
    servers: [REAPED],
    floor: { redisUrl: core.redis.url, key: `${DOMAIN}_alg_fixed_floor` },
    rls: { descriptors: 1, algorithm: "fixed-window (INCRBY + EXPIRE)", floor: true },
  });
  return rows;
}

function runFloor(env) {
  return new Promise((resolve, reject) => {
    execFile(
      process.execPath,
      [join(ROOT, "bench", "rls-floor-client.mjs")],
      { env: { PATH: process.env.PATH ?? "", ...env } },
      (error, stdout, stderr) => {
        if (error) reject(new Error(`the RLS floor client failed: ${error.message}\n${stderr}`.trim()));
        else resolve(JSON.parse(stdout));
      },
    );
  });
}

/** load.mjs's measure() for the floor: a warm-up run, `between`, the measured run with each call's latency. */
export async function measureFloor({ redisUrl, key, streams, duration, warmup, between }) {
  const env = { REDIS_URL: redisUrl, KEY: key, CONCURRENCY: String(streams) };
  if (warmup > 0) await runFloor({ ...env, DURATION_MS: String(Math.round(warmup * 1000)) });
  if (between !== undefined) await between();
  const logDir = mkdtempSync(join(os.tmpdir(), "tollgate-rls-floor-"));
  try {
    const latencyFile = join(logDir, "latencies.f64");
    const result = await runFloor({
      ...env,
      DURATION_MS: String(Math.round(duration * 1000)),
      LATENCY_FILE: latencyFile,
    });
    const bytes = readFileSync(latencyFile);
    const latencies = new Float64Array(
      bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength),
    );
    return {
      latencies,
      statuses: { ok: result.calls },
      seconds: result.seconds,
      errors: result.errors,
      timeouts: 0,
    };
  } finally {
    rmSync(logDir, { recursive: true, force: true });
  }
}
