// What tracing costs the check: the allowed row of this build (tracing off: no
// OTEL_EXPORTER_OTLP_ENDPOINT) against the --compare build's in the same run, and, for information, the
// same check on a tollgate of this build with tracing on, exporting to a sink of the bench's own.
// `npm run bench -- --tracing` runs these rows alone; the full run includes them.
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { send } from "../../test/support/http-client.mjs";
import { freePort, waitFor } from "../../test/support/local.mjs";
import { ROOT, startProcess } from "../../test/support/processes.mjs";
import { measurePairs } from "./pairs.mjs";
import { cpuTable, fixed, pairedFigure, percent, rowsTable, targetsTable, thousands } from "./report.mjs";
import { runRows } from "./rows.mjs";
import { benchTollgate } from "./services.mjs";
import { bearer, expectStatus, machineInfo, POLICY, startCore } from "./setup.mjs";

/** The most the tracing-off build may fall below the compare build's allowed checks/s. */
const TRACING_OFF_TOLERANCE = 0.02;
export const TRACED_NAME = "tollgate (tracing on)";

/** bench/otlp-sink.mjs on a free port, in a process of its own (its CPU is shown apart). */
async function startSink() {
  const port = await freePort();
  const proc = startProcess({
    name: "otlp sink",
    command: process.execPath,
    args: [join(ROOT, "bench", "otlp-sink.mjs")],
    env: { HOST: "127.0.0.1", PORT: String(port) },
  });
  const url = `http://127.0.0.1:${port}`;
  await waitFor(
    async () => (await send(`${url}/count`).catch(() => ({ status: 0 }))).status === 200,
    10_000,
    "otlp sink",
    proc,
  );
  return { ...proc, url };
}

/**
 * The sink and a tollgate of this build with tracing on, on the core's Redis and policy: spans of a
 * `ratio` of the checks (parentbased_traceidratio; the bench's requests carry no traceparent), over
 * OTLP/HTTP protobuf, the specification's default.
 */
export async function startTracing({ redisUrl, policyFile, main, ratio }) {
  const sink = await startSink();
  const tollgate = await benchTollgate({
    redisUrl,
    policyFile,
    main,
    name: TRACED_NAME,
    env: {
      DENIAL_CACHE_SIZE: "0",
      OTEL_EXPORTER_OTLP_ENDPOINT: sink.url,
      OTEL_TRACES_SAMPLER: "parentbased_traceidratio",
      OTEL_TRACES_SAMPLER_ARG: String(ratio),
    },
  });
  return { sink, tollgate, ratio };
}

/** The tracing-on row: the allowed row's target for a pro user of its own, on the tollgate with tracing on. */
export function tracingRows(core, tracing) {
  return [
    {
      redis: true,
      tollgate: true,
      ceiling: "store-ceiling",
      id: "allowed-traced",
      short: `allowed, tracing on (${tracing.ratio})`,
      label: `tollgate check, allowed, tracing on: OTLP/HTTP protobuf to a local sink, ${tracing.ratio} of the checks sampled (parentbased_traceidratio), as the allowed row → 200`,
      url: `${tracing.tollgate.checkUrl}/ext_authz/api/products`,
      headers: bearer(core.peers.bench_traced),
      expected: 200,
      server: tracing.tollgate,
      servers: [TRACED_NAME],
    },
  ];
}

/** Tracing off against the compare build (when there is one), and tracing on against off. */
export function tracingTargets(byId, paired = {}) {
  const allowed = byId.allowed;
  const targets = [];
  const before = byId["allowed-compare"];
  if (allowed !== undefined && before !== undefined) {
    const ratio = allowed.load.rps / before.load.rps;
    const pair = paired["allowed/allowed-compare"];
    const rows =
      `${percent(ratio)} (${thousands(allowed.load.rps)} vs ${thousands(before.load.rps)} checks/s); CPU per check ` +
      `${fixed(allowed.serverCpuUsPerRequest, 1)} vs ${fixed(before.serverCpuUsPerRequest, 1)} µs`;
    targets.push({
      target:
        `tracing off (OTEL_EXPORTER_OTLP_ENDPOINT unset): allowed checks/s no more than ${percent(TRACING_OFF_TOLERANCE, 0)} below the compare build's (same run)` +
        (pair === undefined ? "" : ", judged by the pairs of slices back to back"),
      figure: pair === undefined ? rows : `${pairedFigure(pair)}; the rows: ${rows}`,
      met: (pair?.median ?? ratio) >= 1 - TRACING_OFF_TOLERANCE,
    });
  }
  const traced = byId["allowed-traced"];
  if (allowed !== undefined && traced !== undefined) {
    targets.push({
      target: `(report) tracing on, ${traced.short.match(/\(([^)]*)\)/)?.[1]} of the checks sampled: allowed checks/s against tracing off`,
      figure:
        `${percent(traced.load.rps / allowed.load.rps)} (${thousands(traced.load.rps)} vs ${thousands(allowed.load.rps)} checks/s); ` +
        `CPU per check ${fixed(traced.serverCpuUsPerRequest, 1)} vs ${fixed(allowed.serverCpuUsPerRequest, 1)} µs`,
      met: true,
    });
  }
  return targets;
}

/**
 * `npm run bench -- --tracing [--compare FILE]`: only the allowed row, the compare build's (with
 * --compare) and the tracing-on row, interleaved as --rounds says; a table, the targets, and
 * bench/results/tracing.json.
 */
export async function tracingRun({ options, dir, resultsDir }) {
  const machine = machineInfo(options);
  const core = await startCore({ dir, options });
  try {
    const policyFile = join(dir, "policy.yaml");
    const shared = { redisUrl: core.redis.url, policyFile };
    const tracing = await startTracing({ ...shared, main: options.tollgateMain, ratio: options.traceRatio });
    const specs = [
      {
        redis: true,
        tollgate: true,
        id: "allowed",
        short: "allowed",
        label: "tollgate check, allowed, tracing off (this build): Envoy, pro user → 200",
        url: core.checkUrl,
        headers: bearer(core.bob),
        expected: 200,
        servers: ["tollgate"],
      },
    ];
    if (options.compare !== undefined) {
      const compare = await benchTollgate({
        ...shared,
        main: options.compare,
        name: "tollgate (compare build)",
        env: { DENIAL_CACHE_SIZE: "0" },
      });
      specs.push({
        ...specs[0],
        id: "allowed-compare",
        short: "allowed, compare build",
        label: "compare build: allowed (as the allowed row) → 200",
        url: `${compare.checkUrl}/ext_authz/api/products`,
        server: compare,
        servers: ["tollgate (compare build)"],
      });
    }
    specs.push(...tracingRows(core, tracing).map((row) => ({ ...row, ceiling: undefined })));
    for (const spec of specs) await expectStatus(spec.label, spec.url, spec.headers, spec.expected);
    const ctx = { options, redisClient: core.redisClient, tollgate: core.tollgate, redisUrl: core.redis.url };
    const rows = await runRows(specs, ctx);
    const byId = Object.fromEntries(rows.map((row) => [row.id, row]));
    const paired = await measurePairs(specs, ctx, {
      pairs: options.pairs,
      duration: options.pairSeconds,
      warmup: Math.min(options.warmup, 0.5),
    });
    const exported = await send(`${tracing.sink.url}/count`);
    const targets = tracingTargets(byId, paired);
    const report = [
      "## tollgate benchmark: what tracing costs the allowed check",
      "",
      `- ${machine.cpuModel} × ${machine.cpuCount}, node ${machine.node}; ${machine.connections} connections, ` +
        `${machine.duration} s per row after ${machine.warmup} s of warm-up` +
        (machine.rounds > 1 ? `, in ${machine.rounds} round-robin slices` : ""),
      `- the tracing-on tollgate exported ${exported.text} (exports and bytes) to the sink`,
      options.compare === undefined
        ? "- no --compare build: the tracing-off target needs one (e.g. a build of main)"
        : `- compare build: ${options.compare}`,
      "",
      rowsTable(rows),
      "",
      cpuTable(rows),
      "",
      targetsTable(targets),
      "",
    ].join("\n");
    process.stdout.write(`${report}\n`);
    mkdirSync(resultsDir, { recursive: true });
    writeFileSync(
      join(resultsDir, "tracing.json"),
      `${JSON.stringify({ date: new Date().toISOString(), machine, policy: POLICY, rows, targets, report }, null, 2)}\n`,
    );
  } finally {
    core.redisClient.disconnect();
  }
}
