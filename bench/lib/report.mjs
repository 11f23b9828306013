// Turns the measurements into the printed report: one table of rows, the Redis figures, the targets.

export const fixed = (n, digits) => (Number.isFinite(n) ? n.toFixed(digits) : "—");
export const thousands = (n) => (Number.isFinite(n) ? Math.round(n).toLocaleString("en-US") : "—");
export const percent = (n, digits = 1) => (Number.isFinite(n) ? `${(n * 100).toFixed(digits)}%` : "—");

/** A ratio measured in pairs of slices back to back (pairs.mjs), in one line; undefined when not measured. */
export function pairedFigure(paired) {
  if (paired === undefined) return undefined;
  const low = Math.min(...paired.ratios);
  const high = Math.max(...paired.ratios);
  return (
    `median ${paired.median.toFixed(2)}× of ${paired.ratios.length} pairs of ${paired.seconds} s slices back to back ` +
    `(${low.toFixed(2)}–${high.toFixed(2)}; CPU per check ${paired.cpuMedian.toFixed(2)}×)`
  );
}

export function table(header, rows) {
  const lines = [`| ${header.join(" | ")} |`, `|${header.map(() => "---").join("|")}|`];
  for (const row of rows) lines.push(`| ${row.join(" | ")} |`);
  return lines.join("\n");
}

/** "200 100.00%", and any other statuses after it, largest first; socket errors at the end. */
export function statusSummary(row) {
  const { statuses, errors, timeouts } = row.load;
  const total = Object.values(statuses).reduce((a, b) => a + b, 0) + errors;
  const expected = statuses[String(row.expected)] ?? 0;
  const parts = [`${row.expected}: ${percent(total > 0 ? expected / total : 0, 2)}`];
  for (const [status, n] of Object.entries(statuses).sort((a, b) => b[1] - a[1])) {
    if (status !== String(row.expected)) parts.push(`${status}: ${percent(n / total, 2)}`);
  }
  if (errors > 0) parts.push(`errors: ${errors}${timeouts > 0 ? ` (${timeouts} timeouts)` : ""}`);
  if (row.degraded > 0) parts.push(`${row.degraded} degraded`);
  if (row.outcomes !== undefined) parts.push(...grpcOutcomes(row));
  return parts.join(", ");
}

const CHECK_CALL = "envoy.service.auth.v3.Authorization/Check";
const RLS_CALL = "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/** A gRPC row's answers as tollgate counted them: the expected decision's share, calls not OK. */
function grpcOutcomes(row) {
  const { decisions, calls } = row.outcomes;
  const total = Object.values(decisions).reduce((a, b) => a + b, 0);
  const of = row.rls === undefined ? "decisions" : "descriptor results";
  const parts = [`${row.grpc.expectOutcome}: ${percent(grpcExpectedFraction(row), 2)} of ${of}`];
  for (const [key, n] of Object.entries(decisions).sort((a, b) => b[1] - a[1])) {
    if (key !== row.grpc.expectOutcome) parts.push(`${key}: ${percent(n / total, 2)}`);
  }
  for (const [key, n] of Object.entries(calls)) {
    const [method, status] = key.split(" ");
    if (status !== "OK")
      parts.push(`${[CHECK_CALL, RLS_CALL].includes(method) ? "calls" : method} ${status}: ${n}`);
  }
  return parts;
}

/** The share of a gRPC row's decisions that were the expected ones (tollgate's counters). */
export function grpcExpectedFraction(row) {
  const { decisions } = row.outcomes;
  const total = Object.values(decisions).reduce((a, b) => a + b, 0);
  return total > 0 ? (decisions[row.grpc.expectOutcome] ?? 0) / total : 0;
}

/** p99 of the gRPC check "well under" Envoy's default ext_authz timeout of 200 ms: a tenth of it. */
export const GRPC_P99_MS = 20;

/**
 * The gRPC rows beside the HTTP rows they mirror (the HTTP ones loaded by autocannon, as every row, and
 * by h2load, the gRPC rows' generator): rates, CPU per answer, latencies, and the ratios the targets
 * name. Lines of the report; one line when the rows were skipped.
 */
export function grpcTable(byId, { skipped }) {
  if (skipped !== undefined) return [`gRPC rows: skipped (${skipped}).`];
  const triples = [
    [
      "ceiling (bare node:http; an empty gRPC method on tollgate's stack)",
      "http-ceiling",
      "http-ceiling-h2load",
      "grpc-ceiling",
    ],
    ["check, allowed", "allowed", "allowed-h2load", "grpc-allowed"],
    ["check, denied", "denied", "denied-h2load", "grpc-denied"],
  ].map(([name, ...ids]) => [name, ...ids.map((id) => byId[id])]);
  const { streams, connections, requestBytes } = byId["grpc-allowed"].grpc;
  const three = (rows, value, digits) => rows.map((row) => fixed(value(row), digits)).join(" / ");
  const ratios = ([autocannon, h2load, grpc], value) =>
    `${fixed(value(grpc) / value(h2load), 2)}× (${fixed(value(grpc) / value(autocannon), 2)}×)`;
  const rps = (row) => row.load.rps;
  const cpu = (row) => row.serverCpuUsPerRequest;
  return [
    `gRPC beside HTTP. gRPC: h2load, ${streams} streams over ${connections} connections, a CheckRequest of ${requestBytes} bytes ` +
      "as Envoy sends one (source, destination, request id, pseudo-headers, the bearer token). HTTP: the rows above, loaded by " +
      `autocannon (${streams} connections, one request in flight each), and the same loaded by h2load --h1 (likewise), the gRPC ` +
      "rows' generator, which leaves the shared cores more of their time than autocannon does. Each cell: HTTP by autocannon / " +
      "HTTP by h2load / gRPC; ratios: gRPC against HTTP by h2load (against HTTP by autocannon). CPU: the serving process's " +
      "(tollgate's; the ceiling's) per answer.",
    "",
    table(
      ["row", "req/s", "gRPC / HTTP req/s", "server CPU µs/request", "gRPC / HTTP CPU", "p50 ms", "p99 ms"],
      triples.map(([name, ...rows]) => [
        name,
        rows.map((row) => thousands(rps(row))).join(" / "),
        ratios(rows, rps),
        three(rows, cpu, 0),
        ratios(rows, cpu),
        three(rows, (row) => row.load.p50, 2),
        three(rows, (row) => row.load.p99, 2),
      ]),
    ),
  ];
}

/** The gRPC listener's targets, when the gRPC rows ran: judged against the HTTP rows loaded by h2load. */
function grpcTargets(byId) {
  const [allowed, denied, ceiling] = ["grpc-allowed", "grpc-denied", "grpc-ceiling"].map((id) => byId[id]);
  if (allowed === undefined) return [];
  // [gRPC row, HTTP row by h2load, HTTP row by autocannon]
  const pairs = [
    [allowed, byId["allowed-h2load"], byId.allowed],
    [denied, byId["denied-h2load"], byId.denied],
  ];
  const rate = (grpc, http) => grpc.load.rps / http.load.rps;
  const cpu = (grpc, http) => grpc.serverCpuUsPerRequest / http.serverCpuUsPerRequest;
  const expected = [allowed, denied].map(grpcExpectedFraction);
  const notOk = [allowed, denied].map(failedCalls);
  const httpH2load = ["http-ceiling-h2load", "allowed-h2load", "denied-h2load"].map((id) => byId[id]);
  return [
    {
      target: "gRPC allowed checks/s ≥ 0.9× the HTTP allowed check's (both loaded by h2load)",
      figure:
        pairs
          .map(
            ([grpc, http, autocannon]) =>
              `${http.short.split(",")[0]} ${fixed(rate(grpc, http), 2)}× (${thousands(grpc.load.rps)} vs ${thousands(http.load.rps)} checks/s; ` +
              `${fixed(rate(grpc, autocannon), 2)}× the autocannon row's ${thousands(autocannon.load.rps)})`,
          )
          .join(", ") +
        `; the gRPC ceiling ${thousands(ceiling.load.rps)} vs the HTTP ceiling's ${thousands(byId["http-ceiling-h2load"].load.rps)} req/s`,
      met: rate(allowed, byId["allowed-h2load"]) >= 0.9,
    },
    {
      target: "tollgate CPU per gRPC check ≤ 1.2× the HTTP check's (allowed and denied)",
      figure:
        pairs
          .map(
            ([grpc, http, autocannon]) =>
              `${http.short.split(",")[0]} ${fixed(grpc.serverCpuUsPerRequest, 0)} vs ${fixed(http.serverCpuUsPerRequest, 0)} µs ` +
              `(${fixed(cpu(grpc, http), 2)}×; ${fixed(cpu(grpc, autocannon), 2)}× the autocannon row's ${fixed(autocannon.serverCpuUsPerRequest, 0)} µs)`,
          )
          .join(", ") +
        `; the gRPC ceiling ${fixed(ceiling.serverCpuUsPerRequest, 0)} µs vs the HTTP ceiling's ${fixed(byId["http-ceiling-h2load"].serverCpuUsPerRequest, 0)} µs`,
      met: pairs.every(([grpc, http]) => cpu(grpc, http) <= 1.2),
    },
    {
      target: `p99 of the gRPC check at ${allowed.grpc.streams} streams well under Envoy's 200 ms ext_authz timeout (≤ ${GRPC_P99_MS} ms, a tenth)`,
      figure:
        `allowed ${fixed(allowed.load.p99, 2)} ms, denied ${fixed(denied.load.p99, 2)} ms ` +
        `(HTTP by h2load: ${fixed(byId["allowed-h2load"].load.p99, 2)} and ${fixed(byId["denied-h2load"].load.p99, 2)} ms)`,
      met: allowed.load.p99 <= GRPC_P99_MS && denied.load.p99 <= GRPC_P99_MS,
    },
    {
      target:
        "(bench sanity) h2load rows: every answer the expected HTTP status, every gRPC decision the expected one, no call failed",
      figure:
        `expected HTTP status ${[allowed, denied, ceiling, ...httpH2load].map((row) => percent(expectedFraction(row), 3)).join(" / ")} ` +
        "(gRPC allowed / denied / ceiling, HTTP by h2load ceiling / allowed / denied); " +
        `expected gRPC decisions ${percent(expected[0], 3)} / ${percent(expected[1], 3)}; Check calls failed ${notOk[0].failed} / ${notOk[1].failed}, ` +
        `cancelled by h2load at slice ends ${notOk[0].cancelled} / ${notOk[1].cancelled} (at most the streams in flight, ${notOk[0].inFlight} / ${notOk[1].inFlight})`,
      met:
        [allowed, denied, ceiling, ...httpH2load].every((row) => expectedFraction(row) === 1) &&
        expected.every((share) => share === 1) &&
        notOk.every(({ failed, cancelled, inFlight }) => failed === 0 && cancelled <= inFlight),
    },
  ];
}

/**
 * A gRPC row's calls that did not end OK: `failed` with any status but CANCELLED, and `cancelled`,
 * which h2load causes when a slice ends with calls in flight (at most its streams, once per slice:
 * `inFlight`); more cancellations than that are a failure of the server's.
 */
export function failedCalls(row) {
  let failed = 0;
  let cancelled = 0;
  for (const [key, count] of Object.entries(row.outcomes.calls)) {
    if (key.endsWith(" OK")) continue;
    if (key.endsWith(" CANCELLED")) cancelled += count;
    else failed += count;
  }
  return { failed, cancelled, inFlight: row.load.slices * row.grpc.streams };
}

export function expectedFraction(row) {
  const { statuses, errors } = row.load;
  const total = Object.values(statuses).reduce((a, b) => a + b, 0) + errors;
  return total > 0 ? (statuses[String(row.expected)] ?? 0) / total : 0;
}

export function rowsTable(rows) {
  return table(
    [
      "row",
      "req/s",
      "p50 ms",
      "p99 ms",
      "expected status (share)",
      "ratio to its ceiling",
      "server CPU µs/request",
      "Redis script µs/call",
      "Redis µs/request",
      "Redis CPU µs/request",
      "script calls per request",
      "Redis cmds per request (incl. in-script)",
      "tollgate RSS peak",
      "machine CPU: this bench / other processes",
    ],
    rows.map((row) => [
      row.label,
      thousands(row.load.rps),
      fixed(row.load.p50, 2),
      fixed(row.load.p99, 2),
      statusSummary(row),
      row.ratio === undefined ? "—" : `${percent(row.ratio.value)} of ${row.ratio.of}`,
      fixed(row.serverCpuUsPerRequest, 0),
      row.redis === undefined ? "—" : fixed(row.redis.scriptUsecPerCall, 1),
      row.redis === undefined ? "—" : fixed(row.redis.commandUsecPerRequest, 1),
      row.redis === undefined ? "—" : fixed(row.redis.cpuUsPerRequest, 1),
      row.redis === undefined ? "—" : fixed(row.redis.scriptCallsPerRequest, 3),
      row.redis === undefined ? "—" : fixed(row.redis.allPerRequest, 2),
      row.rss === undefined ? "—" : `${fixed(row.rss.peakMb, 0)} MB`,
      row.cpu === undefined ? "—" : `${percent(row.cpu.ours, 0)} / ${percent(row.cpu.others, 0)}`,
    ]),
  );
}

const byCommand = (counts) =>
  Object.entries(counts)
    .map(([name, n]) => `${name} ×${n}`)
    .join(", ") || "—";

export function monitorTable(samples) {
  return table(
    [
      "MONITOR sample",
      "checks",
      "top-level cmds/check",
      "in-script cmds/check",
      "top-level commands seen",
      "upkeep meanwhile (every tollgate on this Redis, once a second each)",
    ],
    samples.map((s) => [
      s.label,
      thousands(s.checks),
      fixed(s.topLevel / s.checks, 3),
      fixed(s.inScript / s.checks, 2),
      byCommand(s.topLevelByCommand),
      byCommand(s.upkeepByCommand),
    ]),
  );
}

export function memoryTable(windows) {
  return table(
    [
      "subject's key",
      "list entries",
      "encoding",
      "MEMORY USAGE (bytes) per subject",
      "bytes per tracked request",
    ],
    windows.map((w) => [
      w.label,
      w.entries === undefined ? "—" : thousands(w.entries),
      w.encoding,
      thousands(w.bytes),
      w.entries === undefined ? "—" : fixed(w.bytesPerEntry, 1),
    ]),
  );
}

export function targetsTable(targets) {
  return table(
    ["target", "figure", "verdict"],
    targets.map((t) => [t.target, t.figure, t.met ? "met" : "NOT met"]),
  );
}

/** The performance targets, each with its figure from this run. */
export function evaluateTargets({ byId, monitor, memory, paired = {} }) {
  const allowed = byId.allowed;
  const denied = byId.denied;
  const checkRows = [byId.allowed, byId.denied, byId.anonymous];
  const targets = [];
  const store = byId["store-ceiling"];
  targets.push({
    target: "allowed check ≥ 80% of the store ceiling",
    figure:
      `${percent(allowed.ratio.value)} (${thousands(allowed.load.rps)} vs ${thousands(store.load.rps)} req/s); CPU per request ` +
      `${fixed(allowed.serverCpuUsPerRequest, 0)} vs ${fixed(store.serverCpuUsPerRequest, 0)} µs, i.e. ${percent(store.serverCpuUsPerRequest / allowed.serverCpuUsPerRequest)} of the ceiling's efficiency`,
    met: allowed.ratio.value >= 0.8,
  });
  const coalesced = byId["store-ceiling-coalesced"];
  targets.push({
    target: "(report) allowed check against the store ceiling with coalesced writes (the same trick)",
    figure:
      `${percent(allowed.load.rps / coalesced.load.rps)} (${thousands(allowed.load.rps)} vs ${thousands(coalesced.load.rps)} req/s); ` +
      `CPU per request ${fixed(allowed.serverCpuUsPerRequest, 0)} vs ${fixed(coalesced.serverCpuUsPerRequest, 0)} µs`,
    met: true,
  });
  targets.push({
    target: "allowed check ≥ 8,000 checks/s",
    figure: `${thousands(allowed.load.rps)} checks/s`,
    met: allowed.load.rps >= 8000,
  });
  const two = byId["allowed-2-workers"];
  targets.push({
    target: "(report) allowed checks, WORKERS=2 against 1",
    figure:
      `${thousands(two.load.rps)} vs ${thousands(allowed.load.rps)} req/s (${fixed(two.load.rps / allowed.load.rps, 2)}×); ` +
      `CPU per check ${fixed(two.serverCpuUsPerRequest, 0)} vs ${fixed(allowed.serverCpuUsPerRequest, 0)} µs`,
    met: true,
  });
  const [allowedBefore, deniedBefore] = [byId["allowed-compare"], byId["denied-compare"]];
  if (allowedBefore !== undefined && deniedBefore !== undefined) {
    targets.push({
      target: "(report) compare build: denied against allowed",
      figure:
        `denied ${thousands(deniedBefore.load.rps)} vs allowed ${thousands(allowedBefore.load.rps)} req/s ` +
        `(${percent(deniedBefore.load.rps / allowedBefore.load.rps)}); CPU per check ` +
        `${fixed(deniedBefore.serverCpuUsPerRequest, 0)} vs ${fixed(allowedBefore.serverCpuUsPerRequest, 0)} µs`,
      met: true,
    });
  }
  const deniedPair = paired["denied/allowed"];
  const deniedRows =
    `denied ${thousands(denied.load.rps)} vs allowed ${thousands(allowed.load.rps)} req/s (${percent(denied.load.rps / allowed.load.rps)}); ` +
    `CPU per check ${fixed(denied.serverCpuUsPerRequest, 0)} vs ${fixed(allowed.serverCpuUsPerRequest, 0)} µs`;
  targets.push({
    target:
      "denied checks at least as fast as allowed ones (no denial cache)" +
      (deniedPair === undefined ? "" : ", judged by the pairs of slices back to back"),
    figure: deniedPair === undefined ? deniedRows : `${pairedFigure(deniedPair)}; the rows: ${deniedRows}`,
    met: (deniedPair?.median ?? denied.load.rps / allowed.load.rps) >= 1,
  });
  const cached = byId["denied-cached"];
  targets.push({
    target: "cached denials ≥ 2× the allowed row, with no Redis command",
    figure:
      `${thousands(cached.load.rps)} vs ${thousands(allowed.load.rps)} req/s (${fixed(cached.load.rps / allowed.load.rps, 2)}×); ` +
      `Redis commands per cached denial ${fixed(cached.redis.allPerRequest, 4)}`,
    met: cached.load.rps >= 2 * allowed.load.rps && cached.redis.allPerRequest < 0.001,
  });
  const script = (row) => row.redis.scriptUsecPerCall;
  const log = [allowed, denied];
  targets.push({
    target: "sliding log: ≤ 15 µs of script time per check (usec_per_call), allowed and denied",
    figure: log.map((r) => `${r.short} ${fixed(script(r), 1)} µs`).join(", "),
    met: log.every((r) => script(r) <= 15),
  });
  const o1 = ["allowed-counter", "denied-counter", "allowed-gcra", "denied-gcra"].map((id) => byId[id]);
  targets.push({
    target: "sliding-counter and gcra: ≤ 8 µs of script time per check",
    figure: o1.map((r) => `${r.short} ${fixed(script(r), 1)} µs`).join(", "),
    met: o1.every((r) => script(r) <= 8),
  });
  const perCheck = checkRows.map((r) => r.redis.scriptCallsPerRequest);
  const topLevel = monitor.map((s) => s.topLevel / s.checks);
  const one = (n) => Math.abs(n - 1) < 0.005;
  targets.push({
    target: "exactly one Redis command per check",
    figure:
      `script calls (FCALL/EVALSHA) per check ${perCheck.map((n) => fixed(n, 3)).join(" / ")} (allowed / denied / anonymous); ` +
      `MONITOR top-level ${monitor.map((s, i) => `${s.short} ${fixed(topLevel[i], 3)}`).join(", ")}`,
    met: perCheck.every(one) && topLevel.every(one),
  });
  const logs = memory.filter((w) => w.algorithm === "sliding-log");
  const biggest = logs[logs.length - 1];
  targets.push({
    target: "sliding log: ≤ 120 bytes of Redis memory per tracked request",
    figure: logs.map((w) => `${fixed(w.bytesPerEntry, 1)} B at ${thousands(w.count)}`).join(", "),
    met: biggest !== undefined && biggest.bytesPerEntry <= 120,
  });
  const o1Memory = memory.filter((w) => w.algorithm === "sliding-counter" || w.algorithm === "gcra");
  targets.push({
    target: "sliding-counter and gcra: ≤ 200 bytes per subject at any rate",
    figure: o1Memory.map((w) => `${w.algorithm} ${thousands(w.count)}: ${w.bytes} B`).join(", "),
    met: o1Memory.length > 0 && o1Memory.every((w) => w.bytes <= 200),
  });
  const viaTollgate = byId["nginx-tollgate"];
  const direct = byId["nginx-direct"];
  targets.push({
    target: "full path through nginx with tollgate ≥ 50% of nginx direct",
    figure:
      `${percent(viaTollgate.ratio.value)} (${thousands(viaTollgate.load.rps)} vs ${thousands(direct.load.rps)} req/s); CPU per request ` +
      `${fixed(viaTollgate.serverCpuUsPerRequest, 0)} vs ${fixed(direct.serverCpuUsPerRequest, 0)} µs`,
    met: viaTollgate.ratio.value >= 0.5,
  });
  targets.push({
    target: "p99 of the check ≤ 10 ms",
    figure: checkRows.map((r) => `${r.short} ${fixed(r.load.p99, 2)} ms`).join(", "),
    met: checkRows.every((r) => r.load.p99 <= 10),
  });
  targets.push(...grpcTargets(byId));
  targets.push({
    target: "(bench sanity) allowed-check row is all 200s",
    figure: percent(expectedFraction(allowed), 3),
    met: expectedFraction(allowed) === 1,
  });
  return targets;
}

/**
 * Where the CPU went in each row, by process, as shares of the whole machine; and the speed probe
 * before each slice, relative to the fastest probe of the run (1.00), which shows a drifting machine.
 */
export function cpuTable(rows) {
  const names = [...new Set(rows.flatMap((row) => Object.keys(row.cpu?.byProcess ?? {})))];
  const fastest = Math.min(...rows.flatMap((row) => row.probeMs ?? []));
  const speeds = (row) => (row.probeMs ?? []).map((ms) => fixed(fastest / ms, 2)).join(" ");
  return table(
    ["CPU by process (share of all cores)", ...names, "other processes", "machine speed per slice"],
    rows.map((row) => [
      row.short,
      ...names.map((name) => {
        const share = row.cpu?.byProcess[name];
        return share === undefined || share < 0.005 ? "·" : percent(share, 0);
      }),
      row.cpu === undefined ? "—" : percent(row.cpu.others, 0),
      speeds(row),
    ]),
  );
}

export function machineLines(machine) {
  return [
    `- CPU: ${machine.cpuModel} × ${machine.cpuCount} (${machine.os})`,
    `- memory: ${fixed(machine.totalMemGb, 1)} GB`,
    `- node ${machine.node}, ${machine.redis}, ${machine.nginx}, autocannon ${machine.autocannon}`,
    `- load average before the run: ${machine.loadAverage.map((n) => n.toFixed(2)).join(", ")}`,
    `- load: ${machine.connections} connections, ${machine.duration} s per row after a ${machine.warmup} s warm-up` +
      (machine.rounds > 1 ? ` (in ${machine.rounds} round-robin slices)` : "") +
      ", " +
      `nginx ${machine.nginxWorkers} worker(s); load generator, Redis, nginx and the servers share the machine`,
  ];
}
