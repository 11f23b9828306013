// npm run bench: tollgate's check path measured next to its ceilings in one run.
// Starts its own redis-server, tollgate, upstream, two nginx and two ceiling servers on free loopback
// ports, drives each row with autocannon, prints one report and writes bench/results/latest.json.
// It exits non-zero only when the bench itself could not run; missed targets are reported, not failures.
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { ROOT, stopAll, stopAllOnSignals } from "../test/support/processes.mjs";
import { benchRun } from "./lib/bench-run.mjs";
import { profileRun } from "./lib/profile-run.mjs";
import { tracingRun } from "./lib/tracing.mjs";

const HELP = `usage: npm run bench -- [options]
  --connections N    concurrent connections for every row (default 64)
  --duration S       seconds measured per row (default 10)
  --warmup S         seconds of warm-up before each row, not measured (default 2)
  --prime S          before the first round, S seconds of load (not measured) on each process that
                     serves rows, the first of its rows over each protocol (default 4; 0: none), so
                     that no process is measured in its first seconds under load
  --rounds N         cut each row into N slices run round-robin across the rows (default 1: one row
                     after another); steadier ratios on a machine whose speed drifts (a shared VM)
  --pairs N          the targets that compare two rows (cached denials against allowed, denied against
                     allowed, tracing off against the compare build) also measure them in N pairs of
                     slices back to back, and judge by the median pair (default 6; 0: by the rows)
  --pair-seconds S   seconds measured per slice of a pair (default 2)
  --nginx-workers N  worker_processes of both nginx (default 1)
  --tollgate FILE    tollgate's entry point (default dist/src/main.js), e.g. to compare another build
  --compare FILE     also measure the allowed and denied rows against this tollgate build in the same
                     run (e.g. a build of main, before a change)
  --only IDS         measure only these rows (comma-separated ids, e.g. allowed,allowed-provider,allowed-api-key)
                     and print their table and the refresh-storm guard, without targets or JSON
  --profile [ROW]    instead of the table: ROW's load (allowed, denied, cached or anonymous; default allowed)
                     against a tollgate under node --cpu-prof, and its top functions by self time
  --tracing          instead of the whole table: only the allowed row (tracing off), the --compare build's
                     and the allowed row with tracing on, with the tracing targets
  --trace-ratio R    the share of checks the tracing-on row samples (default 0.1)
`;
const PROFILE_ROWS = ["allowed", "denied", "cached", "anonymous"];

/** The options, or a usage error on stderr (no stack trace) and exit code 2. */
function readOptions() {
  try {
    return parseOptions();
  } catch (error) {
    process.stderr.write(`bench: ${error.message}\n(npm run bench -- --help for the options)\n`);
    process.exit(2);
  }
}

function parseOptions() {
  const args = process.argv.slice(2);
  // "--profile" alone means the allowed row; parseArgs wants a value for a string option.
  const at = args.indexOf("--profile");
  if (at >= 0 && !PROFILE_ROWS.includes(args[at + 1] ?? "")) args.splice(at + 1, 0, "allowed");
  const { values } = parseArgs({
    args,
    options: {
      connections: { type: "string", default: "64" },
      duration: { type: "string", default: "10" },
      warmup: { type: "string", default: "2" },
      rounds: { type: "string", default: "1" },
      prime: { type: "string", default: "4" },
      pairs: { type: "string", default: "6" },
      "pair-seconds": { type: "string", default: "2" },
      "nginx-workers": { type: "string", default: "1" },
      tollgate: { type: "string", default: "dist/src/main.js" },
      compare: { type: "string" },
      profile: { type: "string" },
      only: { type: "string" },
      tracing: { type: "boolean", default: false },
      "trace-ratio": { type: "string", default: "0.1" },
      help: { type: "boolean", short: "h", default: false },
    },
  });
  if (values.help) {
    process.stdout.write(HELP);
    process.exit(0);
  }
  const number = (name, min) => {
    const n = Number(values[name]);
    if (!Number.isInteger(n) || n < min)
      throw new Error(`--${name} must be an integer ≥ ${min}, got ${values[name]}`);
    return n;
  };
  if (values.profile !== undefined && !PROFILE_ROWS.includes(values.profile)) {
    throw new Error(`--profile takes one of ${PROFILE_ROWS.join(", ")}, got ${values.profile}`);
  }
  const traceRatio = Number(values["trace-ratio"]);
  if (!(traceRatio >= 0 && traceRatio <= 1)) {
    throw new Error(`--trace-ratio must be a number from 0 to 1, got ${values["trace-ratio"]}`);
  }
  return {
    tracing: values.tracing,
    traceRatio,
    connections: number("connections", 1),
    duration: number("duration", 1),
    warmup: number("warmup", 0),
    rounds: number("rounds", 1),
    prime: number("prime", 0),
    pairs: number("pairs", 0),
    pairSeconds: number("pair-seconds", 1),
    nginxWorkers: number("nginx-workers", 1),
    tollgateMain: values.tollgate,
    compare: values.compare,
    profileRow: values.profile,
    only: values.only?.split(",").map((s) => s.trim()),
  };
}

async function main() {
  // However the bench ends, no process it started outlives it (test/support/leftovers.mjs on exit).
  stopAllOnSignals("bench");
  const options = readOptions();
  const dir = mkdtempSync(join(os.tmpdir(), "tollgate-bench-"));
  const context = { options, dir, resultsDir: join(ROOT, "bench", "results") };
  try {
    await (options.profileRow !== undefined
      ? profileRun(context)
      : options.tracing
        ? tracingRun(context)
        : benchRun(context));
  } finally {
    await stopAll();
    rmSync(dir, { recursive: true, force: true });
  }
}

main().then(
  () => process.exit(0),
  (error) => {
    const text = error instanceof Error ? (error.stack ?? error.message) : String(error);
    process.stderr.write(`bench: failed: ${text}\n`);
    process.exit(1);
  },
);
