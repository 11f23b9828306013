// `npm run bench -- --profile`: one check row's load against a tollgate under `node --cpu-prof`, and
// its top functions by self time, counted over the measured window only.
import { copyFileSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { measure, summarizeLoad } from "./load.mjs";
import { summarizeProfile } from "./profile.mjs";
import { BUILT_IN, bearer, exhaust, startCore } from "./setup.mjs";

const pct = (share) => `${(share * 100).toFixed(1)}%`;

export async function profileRun({ options, dir, resultsDir }) {
  const profileDir = join(dir, "profile");
  const nodeArgs = ["--cpu-prof", `--cpu-prof-dir=${profileDir}`, "--cpu-prof-name=tollgate.cpuprofile"];
  // The built-in policy alone, so that an older build (--tollgate) can be profiled as well.
  // "cached": the denied row's load against a tollgate with the denial cache on.
  const kind = options.profileRow;
  const core = await startCore({ dir, options, nodeArgs, policy: BUILT_IN, denialCache: kind === "cached" });
  try {
    const alice = bearer(core.alice);
    const headers = { allowed: bearer(core.bob), denied: alice, cached: alice, anonymous: {} }[kind];
    if (kind === "denied" || kind === "cached") await exhaust(core.checkUrl, headers);
    process.stderr.write(`bench: ${kind}-check load against tollgate under --cpu-prof …\n`);
    const nowUs = () => Number(process.hrtime.bigint() / 1000n);
    let fromUs = 0;
    const slice = await measure({
      url: core.checkUrl,
      headers,
      connections: options.connections,
      duration: options.duration,
      warmup: options.warmup,
      between: async () => {
        fromUs = nowUs();
      },
    });
    const window = { fromUs, toUs: nowUs() };
    const load = summarizeLoad([slice]);
    // SIGTERM: tollgate drains and exits, and V8 writes the profile on the way out.
    await core.tollgate.stop("SIGTERM", 20_000);
    const file = join(profileDir, "tollgate.cpuprofile");
    const summary = summarizeProfile(file, { top: 30, window });
    mkdirSync(resultsDir, { recursive: true });
    const kept = join(resultsDir, `tollgate-${kind}.cpuprofile`);
    copyFileSync(file, kept);
    writeFileSync(
      join(resultsDir, `profile-${kind}.json`),
      `${JSON.stringify({ load, summary }, null, 2)}\n`,
    );
    const lines = [
      `## tollgate under --cpu-prof, ${kind} checks: ${Math.round(load.rps)} req/s, p99 ${load.p99.toFixed(2)} ms (profiling slows it)`,
      `measured window only (after the warm-up): busy ${summary.busyMs.toFixed(0)} ms, idle ${summary.idleMs.toFixed(0)} ms`,
      "",
      "| self time by origin | ms | share of busy |",
      "|---|---|---|",
      ...summary.origins.map((o) => `| ${o.name} | ${o.ms.toFixed(0)} | ${pct(o.share)} |`),
      "",
      "| function (self time) | ms | share of busy |",
      "|---|---|---|",
      ...summary.functions.map((f) => `| ${f.name} | ${f.ms.toFixed(0)} | ${pct(f.share)} |`),
      "",
      `profile: bench/results/tollgate-${kind}.cpuprofile (open it in Chrome DevTools → Performance)`,
    ];
    process.stdout.write(`${lines.join("\n")}\n`);
  } finally {
    core.redisClient.disconnect();
  }
}
