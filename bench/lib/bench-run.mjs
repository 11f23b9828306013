// The default run: every service up, the rows one after another (the scale-out rows last), then the report and the JSON.
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ROOT, startNginx, startUpstream } from "../../test/support/processes.mjs";
import {
  CHECK_METHOD,
  checkRequestBytes,
  GRPC_CEILING_METHOD,
  grpcCall,
  startGrpcCeiling,
  verifyGrpcRow,
  writeBody,
} from "./grpc.mjs";
import { GRPC_CONNECTIONS, GRPC_HEADERS, h2loadBinary } from "./h2load.mjs";
import { identityRows, stormReport } from "./identity.mjs";
import { windowBytes } from "./redis-stats.mjs";
import {
  cpuTable,
  evaluateTargets,
  expectedFraction,
  grpcTable,
  machineLines,
  memoryTable,
  monitorTable,
  rowsTable,
  targetsTable,
} from "./report.mjs";
import { rlsRows, startRls } from "./rls.mjs";
import { rlsTable, rlsTargets } from "./rls-report.mjs";
import { memoryBySubject, monitorSamples, runRows } from "./rows.mjs";
import { scaleOutRows } from "./scale-out.mjs";
import { benchTollgate, KEY_PREFIX, startCeiling } from "./services.mjs";
import {
  BUILT_IN,
  bearer,
  exhaust,
  expectStatus,
  HUGE,
  HUGE_RULE,
  machineInfo,
  POLICY,
  startCore,
} from "./setup.mjs";
import { startTracing, tracingRows, tracingTargets } from "./tracing.mjs";

/**
 * An nginx of the bench, in the run's folder: "tollgate" is nginx/nginx.conf.template (auth_request to
 * tollgate), "direct" is bench/nginx-direct.conf.template (a plain reverse proxy to the upstream).
 */
const benchNginx = (kind, dir, workers) => ({
  name: `nginx (${kind})`,
  prefix: join(dir, `nginx-${kind}`),
  ...(kind === "tollgate" ? {} : { template: join(ROOT, "bench", "nginx-direct.conf.template") }),
  workers,
  // The production value the README recommends (above tollgate's REDIS_TIMEOUT_MS).
  checkTimeout: "1s",
});

/** The proxies, the upstream and the ceilings, on top of the core (redis-server and tollgate). */
async function startAround(core, { dir, options }) {
  const upstream = await startUpstream();
  const workers = options.nginxWorkers;
  const nginxDirect = await startNginx({
    ...benchNginx("direct", dir, workers),
    upstreamPort: upstream.port,
  });
  const nginxTollgate = await startNginx({
    ...benchNginx("tollgate", dir, workers),
    checkPort: core.tollgate.checkPort,
    publicPort: core.tollgate.port,
    upstreamPort: upstream.port,
  });
  const httpCeiling = await startCeiling("http");
  // One window of HUGE_RULE per ceiling, each in a key of its own.
  const windowEnv = (tag) => ({
    REDIS_URL: core.redis.url,
    WINDOW_KEY: `${KEY_PREFIX}{${tag}}:w:general`,
    WINDOW_LIMIT: String(HUGE_RULE.limit),
    WINDOW_MS: String(HUGE_RULE.windowMs),
  });
  const storeCeiling = await startCeiling("store", windowEnv("ceiling"));
  const coalescedCeiling = await startCeiling(
    "store",
    { ...windowEnv("ceiling-coalesced"), COALESCE: "1" },
    "store ceiling (coalesced)",
  );
  const fixedFloor = await startCeiling("fixed", windowEnv("fixed"));
  // The same build with WORKERS=2 on the same Redis, users and policy: the core's tokens work on it.
  const policyFile = join(dir, "policy.yaml");
  const shared = { redisUrl: core.redis.url, policyFile, main: options.tollgateMain };
  const twoWorkers = await benchTollgate({
    ...shared,
    name: "tollgate (2 workers)",
    workers: 2,
    env: { DENIAL_CACHE_SIZE: "0" },
  });
  // The same build with its denial cache on (the default): refusals answered without Redis.
  const cached = await benchTollgate({ ...shared, name: "tollgate (denial cache)" });
  // --compare FILE: another build (e.g. main's, before a change) measured in the same run, on the
  // same policy, since the rules a check sends grow with the tiers; the built-in policy alone when
  // the build refuses the bench's (an older build may not know its algorithm tiers).
  let compare;
  if (options.compare !== undefined) {
    const start = (file) =>
      benchTollgate({
        ...shared,
        policyFile: file,
        main: options.compare,
        name: "tollgate (compare build)",
        env: { DENIAL_CACHE_SIZE: "0" },
      });
    try {
      compare = { ...(await start(policyFile)), policy: BENCH_POLICY };
    } catch (error) {
      // Said, not swallowed: a build that failed for another reason fails again on the built-in policy.
      const first = String(error?.message ?? error).split("\n")[0];
      process.stderr.write(
        `bench: the compare build did not start on the bench's policy (${first}); trying the built-in one\n`,
      );
      const comparePolicy = join(dir, "policy-compare.yaml");
      writeFileSync(comparePolicy, `# Written by bench/run.mjs from the built-in policy.\n${BUILT_IN}`);
      compare = { ...(await start(comparePolicy)), policy: "the built-in policy, as it refused the bench's" };
    }
  }
  const grpc = await startGrpc(core, dir, options.connections);
  // This build with tracing on: what a sampled share of checks costs, beside the allowed row.
  const tracing = await startTracing({ ...shared, ratio: options.traceRatio });
  return {
    tracing,
    nginxDirect,
    nginxTollgate,
    httpCeiling,
    storeCeiling,
    coalescedCeiling,
    fixedFloor,
    twoWorkers,
    cached,
    compare,
    grpc,
    // A tollgate of its own, with RLS_CONFIG and its denial cache on (the core's is off).
    rls: await startRls(core, dir, grpc, options),
  };
}

/**
 * The gRPC rows' ground: h2load, the rows' request bodies (the allowed and denied rows' users in Envoy's
 * CheckRequest), the gRPC ceiling; or why the rows are skipped (the bench goes on without them).
 * Only the core tollgate is measured over gRPC: the compare build may predate the gRPC listener.
 */
async function startGrpc(core, dir, streams) {
  const h2load = h2loadBinary();
  if (h2load.missing !== undefined) return { skipped: h2load.missing };
  const request = (session) => checkRequestBytes({ path: "/api/products", headers: bearer(session) });
  const allowed = request(core.bob);
  const bodies = {
    allowed: writeBody(dir, "allowed", allowed),
    denied: writeBody(dir, "denied", request(core.alice)),
    // The ceiling reads the same request as the allowed row and answers an empty message.
    ceiling: writeBody(dir, "ceiling", allowed),
  };
  try {
    await grpcCall(core.tollgate.grpcUrl, CHECK_METHOD, readFileSync(bodies.allowed));
  } catch (error) {
    // A build without the gRPC listener (--tollgate an older one): nothing listens on GRPC_PORT.
    // node:http2 reports it as the stream's cancel, caused by the refused connection.
    if (error?.code !== "ECONNREFUSED" && error?.cause?.code !== "ECONNREFUSED") throw error;
    return {
      skipped: `the tollgate under test does not listen on GRPC_PORT (${(error.cause ?? error).message})`,
    };
  }
  const ceiling = await startGrpcCeiling();
  const connections = Math.min(GRPC_CONNECTIONS, streams);
  return { binary: h2load.path, bodies, ceiling, requestBytes: allowed.length, streams, connections };
}

const BENCH_POLICY = "the bench's policy";
const tollgateRow = { redis: true, tollgate: true, ceiling: "store-ceiling", servers: ["tollgate"] };

/** The sliding counter's and gcra's allowed and denied rows, against one tollgate's check URL. */
function algorithmRows(core, { checkUrl, idSuffix, labelPrefix }) {
  return ["counter", "gcra"].flatMap((name) => {
    const algorithm = name === "gcra" ? "gcra" : "sliding-counter";
    return [
      {
        ...tollgateRow,
        id: `allowed-${name}${idSuffix}`,
        short: `allowed, ${name}${idSuffix === "" ? "" : ", compare build"}`,
        label: `${labelPrefix}, allowed, ${algorithm}: Envoy, ${HUGE} → 200`,
        url: checkUrl,
        headers: bearer(core.byAlgorithm[`bench_${name}`]),
        expected: 200,
      },
      {
        ...tollgateRow,
        id: `denied-${name}${idSuffix}`,
        short: `denied, ${name}${idSuffix === "" ? "" : ", compare build"}`,
        label: `${labelPrefix}, denied, ${algorithm}: Envoy, 1/1h spent → 429`,
        url: checkUrl,
        headers: bearer(core.byAlgorithm[`bench_${name}_low`]),
        expected: 429,
      },
    ];
  });
}

/**
 * The gRPC ceiling and the gRPC Check's allowed and denied rows, and the HTTP ceiling and check rows
 * loaded by h2load too (HTTP/1.1, as many connections as autocannon's): the same load generator on
 * both sides, since autocannon costs the shared cores several times what h2load does. None when the
 * gRPC rows are skipped.
 */
function grpcRows(core, around) {
  const { grpc } = around;
  if (grpc.skipped !== undefined) return [];
  const { binary, requestBytes, streams, connections } = grpc;
  const load = `h2load, ${streams} streams over ${connections} connections`;
  const h1 = `h2load --h1, ${streams} connections`;
  const shared = { requestBytes, streams, connections };
  const grpcLoad = (bodyFile) => ({ h2load: { binary, bodyFile }, headers: GRPC_HEADERS });
  const check = (bodyFile, expectCode, expectOutcome) => ({
    ...tollgateRow,
    ...grpcLoad(bodyFile),
    ceiling: "grpc-ceiling",
    url: `${core.tollgate.grpcUrl}${CHECK_METHOD}`,
    expected: 200,
    grpc: { ...shared, bodyFile, expectCode, expectOutcome },
  });
  const httpCheck = (session, expected) => ({
    ...tollgateRow,
    ceiling: "http-ceiling-h2load",
    url: core.checkUrl,
    headers: bearer(session),
    expected,
    h2load: { binary, h1: true },
  });
  return [
    {
      id: "http-ceiling-h2load",
      short: "HTTP ceiling, h2load",
      label: `HTTP ceiling: bare node:http, loaded by h2load (${h1}) → 200`,
      url: `${around.httpCeiling.url}/`,
      expected: 200,
      servers: ["http ceiling"],
      h2load: { binary, h1: true },
    },
    {
      ...httpCheck(core.bob, 200),
      id: "allowed-h2load",
      short: "allowed, h2load",
      label: `tollgate check, allowed: as the allowed row, loaded by h2load (${h1}) → 200`,
    },
    {
      ...httpCheck(core.alice, 429),
      id: "denied-h2load",
      short: "denied, h2load",
      label: `tollgate check, denied: as the denied row, loaded by h2load (${h1}) → 429`,
    },
    {
      id: "grpc-ceiling",
      short: "gRPC ceiling",
      label: `gRPC ceiling: an empty unary method on tollgate's gRPC server stack (${load}) → OK`,
      url: `${grpc.ceiling.url}${GRPC_CEILING_METHOD}`,
      expected: 200,
      servers: ["grpc ceiling"],
      ceiling: "http-ceiling-h2load",
      ...grpcLoad(grpc.bodies.ceiling),
      grpc: { ...shared, bodyFile: grpc.bodies.ceiling },
    },
    {
      ...check(grpc.bodies.allowed, 0, "allow ok"),
      id: "grpc-allowed",
      short: "gRPC allowed",
      label: `tollgate gRPC Check, allowed: as the allowed row (${load}) → OK`,
    },
    {
      ...check(grpc.bodies.denied, 8, "deny rate_limited"),
      id: "grpc-denied",
      short: "gRPC denied",
      label: `tollgate gRPC Check, denied: as the denied row (${load}) → RESOURCE_EXHAUSTED`,
    },
  ];
}

/** A ceiling that uses Redis: counted by its GET /count, compared with the HTTP ceiling. */
const redisCeilingRow = (id, short, label, server, processName) => ({
  id,
  short,
  label,
  url: `${server.url}/`,
  countUrl: `${server.url}/count`,
  expected: 200,
  servers: [processName],
  ceiling: "http-ceiling",
  redis: true,
});

function rowSpecs(core, around, memory) {
  const { bob, carol, alice, checkUrl, redisClient } = core;
  return [
    {
      id: "http-ceiling",
      short: "HTTP ceiling",
      label: "HTTP ceiling: bare node:http → 200",
      url: `${around.httpCeiling.url}/`,
      expected: 200,
      servers: ["http ceiling"],
    },
    redisCeilingRow(
      "store-ceiling",
      "store ceiling",
      `store ceiling: node:http + 1 EVALSHA of a minimal sliding window (${HUGE}) → 200`,
      around.storeCeiling,
      "store ceiling",
    ),
    redisCeilingRow(
      "store-ceiling-coalesced",
      "store ceiling, coalesced",
      `store ceiling with its Redis writes coalesced per event-loop turn, as tollgate's (${HUGE}) → 200`,
      around.coalescedCeiling,
      "store ceiling (coalesced)",
    ),
    redisCeilingRow(
      "fixed-floor",
      "fixed-window floor",
      `fixed-window floor: node:http + 1 pipelined INCR + PEXPIRE (${HUGE}) → 200`,
      around.fixedFloor,
      "fixed ceiling",
    ),
    {
      ...tollgateRow,
      id: "allowed",
      short: "allowed",
      label: `tollgate check, allowed: Envoy, pro user, valid session, ${HUGE} → 200`,
      url: checkUrl,
      headers: bearer(bob),
      expected: 200,
      after: async () => {
        const w = await windowBytes(redisClient, `${KEY_PREFIX}{u:${bob.user_id}}:l:general:0`);
        memory.push({ id: "allowed-row", label: "the allowed row's window, right after the row", ...w });
      },
    },
    ...identityRows(core, tollgateRow, HUGE),
    {
      ...tollgateRow,
      id: "denied",
      short: "denied",
      label: "tollgate check, denied: Envoy, free user, 100/1h exhausted → 429",
      url: checkUrl,
      headers: bearer(alice),
      expected: 429,
    },
    ...tracingRows(core, around.tracing),
    ...grpcRows(core, around),
    ...rlsRows(core, around),
    ...algorithmRows(core, { checkUrl, idSuffix: "", labelPrefix: "tollgate check" }),
    {
      ...tollgateRow,
      id: "denied-cached",
      short: "denied, cached",
      label: "tollgate check, denied with the denial cache on (as the denied row) → 429",
      url: `${around.cached.checkUrl}/ext_authz/api/products`,
      headers: bearer(alice),
      expected: 429,
      server: around.cached,
      servers: ["tollgate (denial cache)"],
    },
    {
      ...tollgateRow,
      id: "anonymous",
      short: "anonymous",
      label: `tollgate check, anonymous: Envoy, no token on GET /api/products (IP window counted, ${HUGE}) → 401`,
      url: checkUrl,
      expected: 401,
    },
    {
      ...tollgateRow,
      id: "allowed-2-workers",
      short: "allowed, WORKERS=2",
      label: `tollgate check, allowed, WORKERS=2 (same build, Redis and user; ${HUGE}) → 200`,
      url: `${around.twoWorkers.checkUrl}/ext_authz/api/products`,
      headers: bearer(bob),
      expected: 200,
      server: around.twoWorkers,
      workers: 2,
      servers: ["tollgate (2 workers)"],
    },
    ...(around.compare === undefined
      ? []
      : [
          {
            ...tollgateRow,
            id: "allowed-compare",
            short: "allowed, compare build",
            label: `compare build: allowed (as the allowed row, on ${around.compare.policy}) → 200`,
            url: `${around.compare.checkUrl}/ext_authz/api/products`,
            headers: bearer(bob),
            expected: 200,
            server: around.compare,
            servers: ["tollgate (compare build)"],
          },
          {
            ...tollgateRow,
            id: "denied-compare",
            short: "denied, compare build",
            label: `compare build: denied (as the denied row, on ${around.compare.policy}) → 429`,
            url: `${around.compare.checkUrl}/ext_authz/api/products`,
            headers: bearer(alice),
            expected: 429,
            server: around.compare,
            servers: ["tollgate (compare build)"],
          },
          // The algorithm tiers are the bench policy's: on the built-in one there are none.
          ...(around.compare.policy !== BENCH_POLICY
            ? []
            : algorithmRows(core, {
                checkUrl: `${around.compare.checkUrl}/ext_authz/api/products`,
                idSuffix: "-compare",
                labelPrefix: "compare build",
              }).map((row) => ({ ...row, server: around.compare, servers: ["tollgate (compare build)"] }))),
        ]),
    {
      id: "nginx-direct",
      short: "nginx direct",
      label: "nginx → upstream directly: GET /api/products → 200",
      url: `${around.nginxDirect.url}/api/products`,
      expected: 200,
      servers: ["nginx (direct)", "upstream"],
    },
    {
      ...tollgateRow,
      id: "nginx-tollgate",
      short: "nginx + tollgate",
      label: `nginx + tollgate auth_request → upstream: GET /api/products, enterprise user, ${HUGE} → 200`,
      url: `${around.nginxTollgate.url}/api/products`,
      headers: bearer(carol),
      expected: 200,
      ceiling: "nginx-direct",
      servers: ["nginx (tollgate)", "upstream", "tollgate"],
    },
  ];
}

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
    const byId = Object.fromEntries(rows.map((row) => [row.id, row]));
    for (const row of rows) {
      if (row.ceiling === undefined || byId[row.ceiling] === undefined) continue;
      const ceiling = byId[row.ceiling];
      row.ratio = { of: ceiling.short, value: row.load.rps / ceiling.load.rps };
    }

    const stormLines = await stormReport(core);
    if (options.only !== undefined) {
      // A few rows only (--only): their table, CPU and the storm guard; no targets, samples or JSON.
      process.stdout.write(`${[rowsTable(rows), "", cpuTable(rows), "", ...stormLines].join("\n")}\n`);
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
      ...evaluateTargets({ byId, monitor, memory }),
      ...tracingTargets(byId),
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
