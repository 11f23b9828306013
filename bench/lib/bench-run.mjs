// The default run: every service up, the rows one after another (the scale-out rows last), then the report and the JSON.
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { startAround } from "./around.mjs";
import { verifyGrpcRow } from "./grpc.mjs";
import { identityTargets, stormReport } from "./identity.mjs";
import { measurePairs } from "./pairs.mjs";
import {
  cpuTable,
  evaluateTargets,
  expectedFraction,
  grpcTable,
  machineLines,
  memoryTable,
  monitorTable,
  pairedFigure,
  rowsTable,
  targetsTable,
} from "./report.mjs";
import { rlsTable, rlsTargets } from "./rls-report.mjs";
import { BENCH_POLICY, rowSpecs } from "./row-specs.mjs";
import { memoryBySubject, monitorSamples, runRows } from "./rows.mjs";
import { scaleOutRows } from "./scale-out.mjs";
import { bearer, exhaust, expectStatus, machineInfo, POLICY, startCore } from "./setup.mjs";
import { tracingTargets } from "./tracing.mjs";

/** Warnings: other processes took a noticeable share of the machine, or checks degraded. */
function disturbance(rows) {
  const lines = [];
  const worst = Math.max(...rows.map((row) => row.cpu?.others ?? 0));
  if (worst >= 0.05) {
    lines.push(
      `WARNING: other processes used up to ${(worst * 100).toFixed(0)}% of the machine during a row (last column above):`,
      "the rows ran under different outside load, so their figures and ratios are disturbed. Re-run on a quiet machine.",
    );
  }
  for (const row of rows) {
    if (row.rls !== undefined && row.storeErrors > 0) {
      lines.push(
        `WARNING: ${row.short}: ${row.storeErrors} calls failed with UNAVAILABLE (the store did not answer within ` +
          "RLS_TIMEOUT_MS, 15 ms, or failed): under Envoy's default failure_mode_deny: false, unlimited.",
      );
    } else if (row.degraded > 0 || row.storeErrors > 0) {
      lines.push(
        `WARNING: ${row.short}: ${row.degraded} checks degraded and ${row.storeErrors} store calls failed ` +
          "(Redis slower than REDIS_TIMEOUT_MS, 100 ms): those checks were answered without the limiter.",
      );
    }
  }
  return lines.length > 0 ? [...lines, ""] : [];
}

function render({ machine, rows, byId, grpc, rls, monitor, memory, targets }) {
  return [
    "## tollgate benchmark",
    "",
    ...machineLines(machine),
    "",
    rowsTable(rows),
    "",
    ...grpcTable(byId, grpc),
    "",
    ...rlsTable(byId, rls),
    "",
    "Ratios: checks against the store ceiling, nginx + tollgate against nginx direct, the store ceiling against the HTTP ceiling.",
    "Redis columns: CONFIG RESETSTAT before and INFO commandstats after each row, divided by the checks tollgate counted",
    "(tollgate_decisions_total) or the requests a ceiling served (its GET /count); commands run inside a script count in",
    "the cmds column. Script µs/call is commandstats' usec_per_call of FCALL/EVALSHA/EVAL (the script's own time, its commands",
    "included); Redis µs/request is the time of the commands clients sent (the script, or INCR + PEXPIRE) per request;",
    "Redis CPU µs/request is the INFO cpu delta (used_cpu_sys + used_cpu_user) per request, networking and parsing included.",
    "Latencies are per response, measured by the load generator. Server CPU: the CPU time of the row's servers (tollgate",
    "or its workers; the ceiling; nginx + upstream, + tollgate) per request, which outside load hardly moves.",
    "",
    cpuTable(rows),
    "",
    ...disturbance(rows),
    monitorTable(monitor),
    "",
    memoryTable(memory),
    "",
    targetsTable(targets),
    "",
  ].join("\n");
}

export async function benchRun({ options, dir, resultsDir }) {
  const machine = machineInfo(options);
  const core = await startCore({ dir, options });
  try {
    const around = await startAround(core, { dir, options });
    if (around.grpc.skipped !== undefined)
      process.stderr.write(`bench: the gRPC rows are skipped: ${around.grpc.skipped}\n`);
    else if (around.rls.skipped !== undefined)
      process.stderr.write(`bench: the rate limit service rows are skipped: ${around.rls.skipped}\n`);
    await exhaust(core.checkUrl, bearer(core.alice));
    for (const tier of ["bench_counter_low", "bench_gcra_low"])
      await exhaust(core.checkUrl, bearer(core.byAlgorithm[tier]));
    if (around.compare !== undefined) {
      await exhaust(`${around.compare.checkUrl}/ext_authz/api/products`, bearer(core.alice));
      // Its windows may be kept under other keys or in another form: spent through its own checks.
      if (around.compare.policy === BENCH_POLICY)
        for (const tier of ["bench_counter_low", "bench_gcra_low"])
          await exhaust(`${around.compare.checkUrl}/ext_authz/api/products`, bearer(core.byAlgorithm[tier]));
    }
    const memory = [];
    const all = [
      ...rowSpecs(core, around, memory),
      ...(options.only === undefined ? await scaleOutRows({ core, dir, options }) : []),
    ];
    const specs = options.only === undefined ? all : all.filter((s) => options.only.includes(s.id));
    for (const spec of specs) {
      if (spec.preflight !== undefined) await spec.preflight();
      else if (spec.floor !== undefined) continue;
      else if (spec.grpc !== undefined) await verifyGrpcRow(spec);
      else await expectStatus(spec.label, spec.url, spec.headers, spec.expected);
    }

    const ctx = { options, redisClient: core.redisClient, tollgate: core.tollgate, redisUrl: core.redis.url };
    const rows = await runRows(specs, ctx);
    const paired = await measurePairs(specs, ctx, {
      pairs: options.pairs,
      duration: options.pairSeconds,
      warmup: Math.min(options.warmup, 0.5),
    });
    const byId = Object.fromEntries(rows.map((row) => [row.id, row]));
    for (const row of rows) {
      if (row.ceiling === undefined || byId[row.ceiling] === undefined) continue;
      const ceiling = byId[row.ceiling];
      row.ratio = { of: ceiling.short, value: row.load.rps / ceiling.load.rps };
    }

    const stormLines = await stormReport(core);
    if (options.only !== undefined) {
      // A few rows only (--only): their table, CPU and the storm guard; no targets, samples or JSON.
      const pairLines = Object.entries(paired).map(([pair, figures]) => `${pair}: ${pairedFigure(figures)}`);
      process.stdout.write(
        `${[rowsTable(rows), "", cpuTable(rows), "", ...pairLines, ...(pairLines.length > 0 ? [""] : []), ...stormLines].join("\n")}\n`,
      );
      return;
    }
    process.stderr.write("bench: MONITOR samples and the memory fill …\n");
    const sampled = ["allowed", "denied", "anonymous", "nginx-tollgate"];
    const monitor = await monitorSamples(
      ctx,
      specs.filter((s) => sampled.includes(s.id)),
    );
    memory.unshift(...(await memoryBySubject(core.redis.url, core.redisClient)));

    const targets = [
      ...evaluateTargets({ byId, monitor, memory, paired }),
      ...tracingTargets(byId, paired),
      ...identityTargets(byId, paired),
      ...rlsTargets(byId),
    ];
    const grpc = around.grpc.skipped === undefined ? {} : { skipped: around.grpc.skipped };
    const rls = around.rls.skipped === undefined ? {} : { skipped: around.rls.skipped };
    const report = [render({ machine, rows, byId, grpc, rls, monitor, memory, targets }), ...stormLines].join(
      "\n",
    );
    process.stdout.write(`${report}\n`);
    mkdirSync(resultsDir, { recursive: true });
    const json = {
      date: new Date().toISOString(),
      machine,
      policy: POLICY,
      rows,
      paired,
      monitor,
      memory,
      targets,
      ...(grpc.skipped === undefined ? {} : { grpcSkipped: grpc.skipped }),
      ...(rls.skipped === undefined ? {} : { rlsSkipped: rls.skipped }),
      report,
    };
    writeFileSync(join(resultsDir, "latest.json"), `${JSON.stringify(json, null, 2)}\n`);
    const allowedShare = (expectedFraction(byId.allowed) * 100).toFixed(3);
    process.stdout.write(`results: bench/results/latest.json (allowed row: ${allowedShare}% 200)\n`);
  } finally {
    core.redisClient.disconnect();
    await core.external.idp.close();
  }
}
