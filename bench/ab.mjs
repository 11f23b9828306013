// Two tollgate builds alive side by side, measured in interleaved slices: the allowed check (bob_pro)
// and the cached denial (alice, past her window) on each, and the two bare HTTP servers (the check
// listener's own, and node:http) between them, every slice loaded by h2load --h1 with 64
// connections. CPU per request is the serving process's user + system time from /proc. A shared
// machine's speed swings within seconds; slices of A and B in ABBA order see the same swings.
//
//   node bench/ab.mjs --a dist/src/main.js --b /tmp/other/dist/src/main.js [--rounds 6] [--seconds 3]
import { execFileSync } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { stopAll } from "../test/support/processes.mjs";
import { cpuSecondsOf } from "./lib/cpu.mjs";
import { h2loadBinary } from "./lib/h2load.mjs";
import { startCeiling } from "./lib/services.mjs";
import { bearer, exhaust, startCore } from "./lib/setup.mjs";

const { values } = parseArgs({
  options: {
    a: { type: "string", default: "dist/src/main.js" },
    b: { type: "string" },
    rounds: { type: "string", default: "6" },
    seconds: { type: "string", default: "3" },
  },
});
if (values.b === undefined) {
  process.stderr.write("usage: node bench/ab.mjs --a <main.js> --b <main.js> [--rounds N] [--seconds S]\n");
  process.exit(2);
}
const rounds = Number(values.rounds);
const seconds = Number(values.seconds);
const h2load = h2loadBinary();
if (h2load.missing !== undefined) throw new Error(`h2load: ${h2load.missing}`);

/** One slice of `url` on the process `pid`: checks/s, CPU µs per request, and the statuses. */
function slice(pid, url, headers) {
  const args = ["--h1", "-c64", ...Object.entries(headers).flatMap(([k, v]) => ["-H", `${k}: ${v}`]), url];
  execFileSync(h2load.path, ["-D", "1", ...args], { stdio: "ignore" });
  const before = cpuSecondsOf(pid);
  const out = execFileSync(h2load.path, ["-D", String(seconds), ...args]).toString();
  const cpu = cpuSecondsOf(pid) - before;
  const done = Number(/requests: \d+ total, \d+ started, (\d+) done/.exec(out)?.[1]);
  const rps = Number(/finished in [\d.]+m?s, ([\d.]+) req\/s/.exec(out)?.[1]);
  const statuses = /status codes: (.*)/.exec(out)?.[1] ?? "";
  if (!(done > 0)) throw new Error(`h2load answered nothing:\n${out}`);
  return { rps, us: (cpu * 1e6) / done, statuses };
}

const builds = { A: resolve(values.a), B: resolve(values.b) };
const cores = {};
for (const [name, main] of Object.entries(builds)) {
  const core = await startCore({
    dir: mkdtempSync(join(tmpdir(), `tollgate-ab-${name}-`)),
    options: { tollgateMain: main },
    denialCache: true,
  });
  await exhaust(core.checkUrl, bearer(core.alice));
  cores[name] = core;
}
const ceilings = { own: await startCeiling("own", {}, "own ceiling"), node: await startCeiling("http") };

const figures = {};
const record = (key, figure) => {
  figures[key] ??= [];
  figures[key].push(figure);
  process.stdout.write(`${key}: ${Math.round(figure.rps)} req/s, ${figure.us.toFixed(1)} µs/request\n`);
};
for (let round = 0; round < rounds; round += 1) {
  process.stdout.write(`round ${round + 1} of ${rounds}\n`);
  for (const name of ["own", "node"]) {
    const ceiling = ceilings[name];
    record(`${name} ceiling`, slice(ceiling.child.pid, `${ceiling.url}/`, {}));
  }
  for (const name of round % 2 === 0 ? ["A", "B"] : ["B", "A"]) {
    const core = cores[name];
    const pid = core.tollgate.child.pid;
    record(`${name} allowed`, slice(pid, core.checkUrl, bearer(core.bob)));
    record(`${name} cached`, slice(pid, core.checkUrl, bearer(core.alice)));
  }
}

const range = (list, digits = 1) =>
  `${Math.min(...list).toFixed(digits)}–${Math.max(...list).toFixed(digits)}`;
process.stdout.write(
  `\nA: ${builds.A}\nB: ${builds.B}\n\n| row | CPU µs per request | req/s | statuses (last slice) |\n|---|---|---|---|\n`,
);
for (const [key, list] of Object.entries(figures)) {
  const last = list[list.length - 1];
  process.stdout.write(
    `| ${key} | ${range(list.map((f) => f.us))} | ${range(
      list.map((f) => f.rps),
      0,
    )} | ${last.statuses} |\n`,
  );
}
for (const name of ["A", "B"]) {
  const ratios = figures[`${name} allowed`].map((f, i) => figures[`${name} cached`][i].rps / f.rps);
  process.stdout.write(
    `${name}: cached / allowed checks/s per round ${ratios.map((r) => r.toFixed(2)).join(" ")}\n`,
  );
}
await stopAll();
process.exit(0);
