// The gRPC rows' load generator: h2load (Debian's nghttp2-client), a few HTTP/2 connections with many
// streams each, as Envoy holds its connections to an ext_authz service. h2load prints no percentiles:
// its per-request log gives the latencies.
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import { join } from "node:path";
import { findBinary } from "../../test/support/local.mjs";

/** Connections h2load opens; the row's streams (--connections, 64 by default) are spread over them. */
export const GRPC_CONNECTIONS = 4;

/** h2load's path, or why the gRPC rows cannot run. */
export function h2loadBinary() {
  try {
    return { path: findBinary("h2load", ["/usr/bin/h2load"]) };
  } catch {
    return { missing: "h2load was not found (Debian: apt-get install nghttp2-client)" };
  }
}

function runH2load(binary, args) {
  return new Promise((resolve, reject) => {
    execFile(binary, args, { maxBuffer: 16 * 1024 * 1024 }, (error, stdout, stderr) => {
      if (error) reject(new Error(`h2load failed: ${error.message}\n${stderr}${stdout}`.trim()));
      else resolve(stdout);
    });
  });
}

/** h2load's summary: the measured seconds and the requests it gave up on. */
export function parseH2loadSummary(stdout) {
  const finished = /finished in ([\d.]+)(m?s),/.exec(stdout);
  const requests =
    /requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored, (\d+) timeout/.exec(
      stdout,
    );
  if (finished === null || requests === null) throw new Error(`h2load printed no summary:\n${stdout}`);
  const seconds = Number(finished[1]) / (finished[2] === "ms" ? 1000 : 1);
  return {
    seconds,
    failed: Number(requests[5]),
    errored: Number(requests[6]),
    timeouts: Number(requests[7]),
  };
}

/**
 * h2load's --log-file: one line per finished request, tab-separated (start µs since the epoch, HTTP
 * status, µs until the end of the response; -1 as the status of a request that got no answer).
 */
export function parseH2loadLog(text) {
  const lines = text.split("\n");
  const latencies = new Float64Array(lines.length);
  const statuses = {};
  let count = 0;
  let unanswered = 0;
  for (const line of lines) {
    if (line === "") continue;
    const [, status, us] = line.split("\t");
    if (Number(status) <= 0) {
      unanswered += 1;
      continue;
    }
    statuses[status] = (statuses[status] ?? 0) + 1;
    latencies[count] = Number(us) / 1000;
    count += 1;
  }
  return { latencies: latencies.subarray(0, count), statuses, unanswered };
}

/**
 * The headers of an ext_authz call (h2load sends its body with -d, as a POST) as Envoy sends them:
 * with its default `timeout` (200 ms) as grpc-timeout, so that the rows pay for the deadline that
 * every call of Envoy's carries.
 */
export const GRPC_HEADERS = { "content-type": "application/grpc", te: "trailers", "grpc-timeout": "200m" };

/**
 * load.mjs's measure() by h2load: its warm-up run, then `between`, then the measured run with its
 * per-request log, from which the latencies (ms) and HTTP statuses come; a slice in the shape measure()
 * returns. gRPC (`bodyFile`, a framed message): `streams` over GRPC_CONNECTIONS connections. `h1`: as
 * the HTTP rows' autocannon, `streams` HTTP/1.1 connections with one request in flight each, so that
 * an HTTP row and a gRPC row can be loaded by the same generator. The gRPC status of each call is not
 * h2load's to see: the gRPC rows count it from tollgate's own counters, and every slice's preflight
 * call checks the answer itself.
 */
export async function measureH2load({
  binary,
  url,
  bodyFile,
  h1 = false,
  headers = {},
  streams,
  duration,
  warmup,
  between,
}) {
  const connections = h1 ? streams : Math.min(GRPC_CONNECTIONS, streams);
  const perConnection = Math.max(1, Math.round(streams / connections));
  const base = [
    ...(h1 ? ["--h1"] : []),
    "-c",
    String(connections),
    "-m",
    String(perConnection),
    "-t",
    "1",
    ...(bodyFile === undefined ? [] : ["-d", bodyFile]),
    ...Object.entries(headers).flatMap(([name, value]) => ["-H", `${name}: ${value}`]),
  ];
  // h2load takes a whole number of seconds, or of milliseconds with "ms".
  const time = (seconds) => `${Math.max(1, Math.round(seconds * 1000))}ms`;
  if (warmup > 0) await runH2load(binary, [...base, "-D", time(warmup), url]);
  if (between !== undefined) await between();
  const logDir = mkdtempSync(join(os.tmpdir(), "tollgate-h2load-"));
  try {
    const logFile = join(logDir, "requests.tsv");
    const stdout = await runH2load(binary, [...base, "-D", time(duration), `--log-file=${logFile}`, url]);
    const summary = parseH2loadSummary(stdout);
    const log = parseH2loadLog(readFileSync(logFile, "utf8"));
    return {
      latencies: log.latencies,
      statuses: log.statuses,
      seconds: summary.seconds,
      errors: summary.errored + log.unanswered,
      timeouts: summary.timeouts,
      connections,
      streamsPerConnection: perConnection,
    };
  } finally {
    rmSync(logDir, { recursive: true, force: true });
  }
}
