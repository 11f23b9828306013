// One measured row, the MONITOR samples and the memory fill: the measurements behind the report.
import { join } from "node:path";
import { send } from "../../test/support/http-client.mjs";
import { ROOT, trackedNames } from "../../test/support/processes.mjs";
import { cpuFigures, cpuUsage, speedProbe } from "./cpu.mjs";
import { verifyGrpcRow } from "./grpc.mjs";
import { measureH2load } from "./h2load.mjs";
import { burst, measure, measureSplit, sampleRss, summarizeLoad, summarizeRss } from "./load.mjs";
import { commandCounts, monitorSample, redisCpuSeconds, resetStats, windowBytes } from "./redis-stats.mjs";
import { measureFloor } from "./rls.mjs";
import { KEY_PREFIX, rlsCounters, tollgateCounters, tollgateOutcomes } from "./services.mjs";
import { sleep } from "./setup.mjs";

const MONITOR_REQUESTS = 2_000;

const servedBy = async (countUrl) => Number((await send(countUrl)).text);

/**
 * Counts what the server under test handled: tollgate's decision counters, or a ceiling's GET /count.
 * Both are exact, unlike the load generator's responses (requests in flight at the end are not counted).
 */
async function counters(spec, tollgate) {
  if (spec.tollgates !== undefined) {
    // A row served by several tollgate processes: their counters summed.
    const each = await Promise.all(spec.tollgates.map((t) => tollgateCounters(t.adminUrl)));
    return addUp(each);
  }
  if (spec.tollgate && spec.rls !== undefined) return rlsCounters((spec.server ?? tollgate).adminUrl);
  if (spec.tollgate) return tollgateCounters((spec.server ?? tollgate).adminUrl);
  if (spec.countUrl !== undefined)
    return { decisions: await servedBy(spec.countUrl), degraded: 0, storeErrors: 0 };
  return undefined;
}

/**
 * Measures one slice of a row: warm-up, then CONFIG RESETSTAT and the counters, then the measured run,
 * while the CPU of every process and tollgate's RSS are sampled; then the counters and Redis again.
 */
export async function measureSlice(spec, { options, redisClient, tollgate }, { duration, warmup }) {
  const probeMs = await speedProbe();
  // A gRPC row's answers are not h2load's to judge: one call of its own first, before every slice.
  if (spec.preflight !== undefined) await spec.preflight();
  else if (spec.grpc !== undefined) await verifyGrpcRow(spec);
  const adminUrl = spec.tollgate ? (spec.server ?? tollgate).adminUrl : undefined;
  const outcomes = spec.grpc !== undefined && adminUrl !== undefined;
  let before;
  let outcomesBefore;
  let rss;
  let cpu;
  let redisCpuBefore;
  const run =
    spec.floor !== undefined
      ? measureFloor
      : spec.h2load !== undefined
        ? measureH2load
        : spec.urls === undefined
          ? measure
          : measureSplit;
  const load = await run({
    url: spec.url,
    urls: spec.urls,
    headers: spec.headers,
    connections: options.connections,
    // h2load: the same number of requests in flight, as streams over a few connections.
    streams: options.connections,
    ...spec.h2load,
    ...spec.floor,
    duration,
    warmup,
    between: async () => {
      await sleep(100);
      await resetStats(redisClient);
      if (spec.redis) redisCpuBefore = await redisCpuSeconds(redisClient);
      before = await counters(spec, tollgate);
      if (outcomes) outcomesBefore = await tollgateOutcomes(adminUrl);
      // With WORKERS the RSS of one process is not the server's: that row shows none.
      if (spec.tollgate && spec.workers === undefined)
        rss = sampleRss((spec.tollgates?.[0] ?? spec.server ?? tollgate).child.pid);
      cpu = cpuUsage(trackedNames());
    },
  });
  const slice = { load, cpu: cpu?.stop(), rss: rss?.stop() ?? [], probeMs };
  if (spec.redis) slice.redisCpuSeconds = (await redisCpuSeconds(redisClient)) - redisCpuBefore;
  await sleep(100);
  const after = await counters(spec, tollgate);
  if (after !== undefined) {
    slice.checks = after.decisions - before.decisions;
    slice.degraded = after.degraded - before.degraded;
    slice.storeErrors = after.storeErrors - before.storeErrors;
  }
  if (outcomes) {
    const outcomesAfter = await tollgateOutcomes(adminUrl);
    const delta = (field) =>
      Object.fromEntries(
        Object.entries(outcomesAfter[field])
          .map(([key, n]) => [key, n - (outcomesBefore[field][key] ?? 0)])
          .filter(([, n]) => n !== 0),
      );
    // An RLS row's "decisions": its descriptors' results (tollgate_rls_hits_total).
    slice.outcomes = {
      decisions: delta(spec.rls === undefined ? "decisions" : "rlsHits"),
      calls: delta("calls"),
    };
  }
  if (spec.redis) slice.counts = await commandCounts(redisClient);
  return slice;
}

function addUp(objects) {
  const total = {};
  for (const object of objects) {
    for (const [key, n] of Object.entries(object)) total[key] = (total[key] ?? 0) + n;
  }
  return total;
}

/** The CPU time of the processes that serve the row, per request (NaN without figures). */
export function serverCpuUs(spec, cpu, served) {
  const seconds = (spec.servers ?? []).reduce((n, name) => n + (cpu?.secondsByProcess[name] ?? 0), 0);
  return cpu === undefined || served === 0 ? Number.NaN : (seconds / served) * 1e6;
}

/** One row from its slices: sums, merged latencies, and the per-request figures. */
function combine(spec, slices) {
  const load = summarizeLoad(slices.map((s) => s.load));
  const row = {
    ...spec,
    load,
    cpu: cpuFigures(slices.map((s) => s.cpu)),
    rss: summarizeRss(slices.map((s) => s.rss)),
    probeMs: slices.map((s) => s.probeMs),
  };
  if (slices[0].checks !== undefined) {
    const { checks, degraded, storeErrors } = addUp(
      slices.map(({ checks: c, degraded: d, storeErrors: e }) => ({
        checks: c,
        degraded: d,
        storeErrors: e,
      })),
    );
    Object.assign(row, { checks, degraded, storeErrors });
  }
  if (slices[0].outcomes !== undefined) {
    row.outcomes = {
      decisions: addUp(slices.map((s) => s.outcomes.decisions)),
      calls: addUp(slices.map((s) => s.outcomes.calls)),
    };
  }
  const served = row.checks ?? load.requests;
  if (spec.redis) {
    const counts = slices.map((s) => s.counts);
    const sum = (field) => counts.reduce((n, c) => n + c[field], 0);
    row.redis = {
      requests: served,
      scriptCalls: sum("scriptCalls"),
      all: sum("all"),
      scriptCallsPerRequest: sum("scriptCalls") / served,
      allPerRequest: sum("all") / served,
      scriptUsecPerRequest: sum("scriptUsec") / served,
      // INFO commandstats' usec_per_call of the script(s): the script's own time per call.
      scriptUsecPerCall: sum("scriptUsec") / sum("scriptCalls"),
      commandUsecPerRequest: sum("topLevelUsec") / served,
      cpuUsPerRequest: (slices.reduce((n, s) => n + s.redisCpuSeconds, 0) / served) * 1e6,
      byCommand: addUp(counts.map((c) => c.byCommand)),
      usecByCommand: addUp(counts.map((c) => c.usecByCommand)),
    };
  }
  // CPU time of the processes that serve the row, per request: unlike req/s, it hardly depends on
  // what else the machine was doing.
  row.serverCpuUsPerRequest = serverCpuUs(spec, row.cpu, served);
  // Each slice apart (in the JSON): whether one round ran dearer than another.
  row.slices = slices.map((s) => {
    const sliceLoad = summarizeLoad([s.load]);
    const cpu = cpuFigures([s.cpu]);
    return {
      rps: sliceLoad.rps,
      serverCpuUsPerRequest: serverCpuUs(spec, cpu, s.checks ?? sliceLoad.requests),
      probeMs: s.probeMs,
    };
  });
  return row;
}

/**
 * Before the first round, each process (or set of processes) that serves rows gets `prime` seconds of
 * its first row's load, over each protocol it serves, unmeasured. A fresh tollgate needs seconds of
 * load before V8 has compiled its hot path: measured (h2load --h1, cached denials, 1 s slices from
 * its start), 65 µs of CPU per request in its first second, 45 in its second, 27–32 from its fifth.
 * Without this, a process whose first row comes late (the cached denials' tollgate) is measured in
 * those seconds while another (the core tollgate, after five rows) is not.
 */
async function prime(specs, ctx) {
  const primed = new Set();
  for (const spec of specs) {
    const key = `${(spec.servers ?? []).join(",")}|${spec.grpc === undefined ? "http" : "grpc"}`;
    if (spec.floor !== undefined || primed.has(key)) continue;
    primed.add(key);
    process.stderr.write(`bench: priming ${key} with the load of "${spec.short}" …\n`);
    await measureSlice(spec, ctx, { duration: ctx.options.prime, warmup: 0 });
  }
}

/**
 * Measures every row. With `rounds` > 1 each row's duration is cut into slices that run round-robin
 * across the rows, so that a machine whose speed drifts during the run (a shared VM) moves all rows
 * alike; the full warm-up comes before a row's first slice, a short one before the others.
 */
export async function runRows(specs, ctx) {
  const { rounds, duration, warmup } = ctx.options;
  const slices = new Map(specs.map((spec) => [spec.id, []]));
  if (ctx.options.prime > 0) await prime(specs, ctx);
  for (let round = 0; round < rounds; round += 1) {
    for (const spec of specs) {
      const suffix = rounds > 1 ? ` (round ${round + 1} of ${rounds})` : "";
      process.stderr.write(`bench: ${spec.label}${suffix} …\n`);
      const sliceWarmup = round === 0 ? warmup : Math.min(warmup, 0.5);
      slices
        .get(spec.id)
        .push(await measureSlice(spec, ctx, { duration: duration / rounds, warmup: sliceWarmup }));
      if (round === rounds - 1 && spec.after !== undefined) await spec.after();
    }
  }
  return specs.map((spec) => combine(spec, slices.get(spec.id)));
}

/** Top-level and in-script Redis commands per check, from a short MONITOR sample of each kind. */
export async function monitorSamples({ redisUrl, tollgate }, specs) {
  const samples = [];
  for (const spec of specs) {
    const before = await tollgateCounters(tollgate.adminUrl);
    let statuses;
    const counts = await monitorSample(redisUrl, async () => {
      ({ statuses } = await burst({
        url: spec.url,
        headers: spec.headers,
        connections: 16,
        amount: MONITOR_REQUESTS,
      }));
    });
    const after = await tollgateCounters(tollgate.adminUrl);
    samples.push({
      label: spec.label,
      short: spec.short,
      checks: after.decisions - before.decisions,
      statuses,
      ...counts,
    });
  }
  return samples;
}

const loadDist = (path) =>
  import(join(ROOT, "dist", path)).catch((error) => {
    throw new Error(`cannot load dist/${path} (npm run bench builds it first): ${error.message}`);
  });

/** Requests counted in a subject's window for the memory figures. */
export const MEMORY_COUNTS = [10, 1_000, 100_000];

/**
 * Redis bytes per subject for each algorithm, with 10, 1,000 and 100,000 requests in its window,
 * written through tollgate's own code (dist/: client, key names, scripts), so the keys are the ones
 * production stores: a sliding log's list, a counter's or gcra's record hash (an address's; a user's
 * state is a field of the user hash, the same bytes less the hash's own).
 */
export async function memoryBySubject(redisUrl, redisClient) {
  const { createRedisClient } = await loadDist("src/store/redis/client.js");
  const { createKeys } = await loadDist("src/store/redis/keys.js");
  const { createRedisLimiter } = await loadDist("src/store/redis/limiter.js");
  const { createLimiter } = await loadDist("src/ratelimit/limiter.js");
  const client = createRedisClient({ url: redisUrl });
  try {
    // The check path's client fails fast while disconnected: wait until it is ready.
    if (client.status !== "ready") {
      await new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error("memory fill: Redis not ready after 10 s")), 10_000);
        client.once("ready", () => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
    const keys = createKeys(KEY_PREFIX);
    const store = createLimiter(createRedisLimiter({ redis: client, keys }));
    const rows = [];
    for (const algorithm of ["sliding-log", "sliding-counter", "gcra"]) {
      for (const count of MEMORY_COUNTS) {
        const subject = `ip:bench-${algorithm}-${count}`;
        const layers = [
          { category: "general", rule: { algorithm, windows: [{ limit: 1_000_000, windowMs: 3_600_000 }] } },
        ];
        let allowed = 0;
        for (let done = 0; done < count; done += 500) {
          const batch = Math.min(500, count - done);
          const hits = await Promise.all(Array.from({ length: batch }, () => store.hit(subject, layers)));
          allowed += hits.filter((h) => h.allowed).length;
        }
        if (allowed !== count) throw new Error(`memory fill: ${allowed} of ${count} hits were allowed`);
        const key = algorithm === "sliding-log" ? keys.log(subject, "general", 0) : keys.record(subject);
        const w = await windowBytes(redisClient, key);
        rows.push({
          id: `memory-${algorithm}-${count}`,
          algorithm,
          count,
          label: `${algorithm}, ${count.toLocaleString("en-US")} requests in the window`,
          ...w,
          bytesPerSubject: w.bytes,
        });
      }
    }
    return rows;
  } finally {
    client.disconnect();
  }
}
