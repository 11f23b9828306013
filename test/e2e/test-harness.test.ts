// The test run itself, as a first-time user meets it: without a server binary it fails at once with one
// message, and however a run ends (it fails halfway, it is stopped, it finishes with a test that left
// servers running) it leaves no server running and no temp folder behind.
import { type ChildProcess, spawn } from "node:child_process";
import {
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { findBinary, requireBinaries } from "../support/binaries.js";
import { freePort } from "../support/ports.js";
import { startNginx } from "../support/processes.mjs";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const VITEST = join(ROOT, "node_modules/vitest/vitest.mjs");
const CONFIG = "test/fixtures/harness/vitest.config.ts";
const REDIS_BINARIES = ["redis-server", "redis-cli", "redis-sentinel"] as const;

const folders: string[] = [];
afterAll(() => {
  for (const folder of folders) rmSync(folder, { recursive: true, force: true });
});

type Run = {
  code: number | null;
  /** Whether the fixture's test had started its servers. */
  marked: boolean;
  output: string;
  ms: number;
  /** Processes the run started that still run: the Redis binaries it ran, and any using its temp dir. */
  running: string[];
  /** What is left in the run's temp dir. */
  left: string[];
};

const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

/** Where a process works and what it holds open (nginx's workers hold its logs); [] when not ours. */
function pathsOf(pid: string): string[] {
  try {
    const fds = readdirSync(`/proc/${pid}/fd`).map((fd) => `/proc/${pid}/fd/${fd}`);
    return [`/proc/${pid}/cwd`, ...fds].flatMap((link) => {
      try {
        return [readlinkSync(link)];
      } catch {
        return [];
      }
    });
  } catch {
    return [];
  }
}

/** Every process that names `folder` in its command line, works in it or holds a file in it. */
function processesIn(folder: string): string[] {
  const found: string[] = [];
  for (const pid of readdirSync("/proc").filter((name) => /^\d+$/.test(name))) {
    try {
      const command = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").join(" ");
      if (command.includes(folder) || pathsOf(pid).some((path) => path.startsWith(folder)))
        found.push(`${pid} ${command}`);
    } catch {
      // gone meanwhile
    }
  }
  return found;
}

/**
 * A vitest run of the fixture with the repository's global setup, on a PATH of its own: `sh`,
 * `prometheus` and `promtool`, and a wrapper per Redis binary that writes down its pid and runs the real one (`missing` ones are left
 * out, `dying` ones exit at once). TMPDIR is a folder of the run's own; `hold` keeps the fixture's
 * test waiting until `stop(child)` (after the fixture wrote its marker) ends the run.
 */
async function nestedRun(options: {
  missing?: readonly string[];
  dying?: readonly string[];
  hold?: boolean;
  stop?: (child: ChildProcess) => void;
}): Promise<Run> {
  const dir = mkdtempSync(join(tmpdir(), "tollgate-harness-"));
  folders.push(dir);
  const [bin, temp, pids, marker] = ["bin", "tmp", "pids", "marker"].map((name) => join(dir, name)) as [
    string,
    string,
    string,
    string,
  ];
  mkdirSync(bin);
  mkdirSync(temp);
  writeFileSync(pids, "");
  symlinkSync(findBinary("sh"), join(bin, "sh"));
  // The setup requires Prometheus's binaries too; the fixture starts neither.
  for (const name of ["prometheus", "promtool"]) symlinkSync(findBinary(name), join(bin, name));
  for (const name of REDIS_BINARIES) {
    if (options.missing?.includes(name)) continue;
    const run = options.dying?.includes(name) ? "exit 1" : `exec ${findBinary(name)} "$@"`;
    writeFileSync(join(bin, name), `#!/bin/sh\necho $$ >> ${pids}\n${run}\n`);
    chmodSync(join(bin, name), 0o755);
  }
  const started = performance.now();
  const child = spawn(process.execPath, [VITEST, "run", "--config", CONFIG], {
    cwd: ROOT,
    env: {
      PATH: bin,
      HOME: process.env.HOME ?? dir,
      TMPDIR: temp,
      CI: "true",
      NO_COLOR: "1",
      HARNESS_MARKER: marker,
      HARNESS_HOLD: options.hold === true ? "1" : "0",
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  child.stdout.on("data", (d: Buffer) => {
    output += d.toString();
  });
  child.stderr.on("data", (d: Buffer) => {
    output += d.toString();
  });
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  if (options.stop !== undefined) {
    const stop = options.stop;
    void (async () => {
      while (!existsSync(marker) && child.exitCode === null) await new Promise((r) => setTimeout(r, 100));
      if (child.exitCode === null) stop(child);
    })();
  }
  const code = await exited;
  const ms = performance.now() - started;
  // What the run started gets a moment to finish stopping; anything running after that stays running.
  const leftovers = () => ({
    running: [
      ...readFileSync(pids, "utf8")
        .split("\n")
        .filter((pid) => pid !== "" && alive(Number(pid)))
        .map((pid) => `${pid} (a Redis binary)`),
      ...processesIn(temp),
    ],
    left: readdirSync(temp),
  });
  for (let waited = 0; waited < 5_000; waited += 100) {
    const now = leftovers();
    if (now.running.length === 0 && now.left.length === 0) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  const { running, left } = leftovers();
  // Whatever the run left, this test stops: SIGTERM first, so that nginx takes its workers along.
  const pidsOf = (lines: string[]) => lines.map((line) => Number(line.split(" ")[0]));
  for (const pid of pidsOf(running)) process.kill(pid, "SIGTERM");
  await new Promise((r) => setTimeout(r, running.length > 0 ? 1_000 : 0));
  for (const pid of pidsOf(leftovers().running)) process.kill(pid, "SIGKILL");
  return { code, marked: existsSync(marker), output, ms, running, left };
}

describe("npm test", () => {
  it("fails at once without redis-sentinel, with one message saying how to install it, and starts nothing", async () => {
    const run = await nestedRun({ missing: ["redis-sentinel"] });
    expect(run.code, run.output).toBe(1);
    expect(run.output).toContain("redis-sentinel was not found on PATH");
    expect(run.output).toContain("apt-get install -y redis-server redis-sentinel nginx prometheus");
    expect(run.output.split("not found on PATH").length - 1, run.output).toBe(1);
    // The message alone: no stack frames, no code frame.
    expect(run.output, run.output).not.toMatch(/^\s+(at |❯ )/m);
    expect(run.output).not.toContain("close timed out");
    expect(run.running).toEqual([]);
    expect(run.left).toEqual([]);
    expect(run.ms).toBeLessThan(20_000);
  }, 60_000);

  it("stops every server it started and removes its temp folders when a start fails halfway", async () => {
    const run = await nestedRun({ dying: ["redis-sentinel"] });
    expect(run.code, run.output).toBe(1);
    expect(run.output).toContain("the process exited during start-up");
    expect(run.running).toEqual([]);
    expect(run.left).toEqual([]);
  }, 120_000);

  it("stops every server and removes every temp folder when vitest is stopped with SIGTERM mid-test", async () => {
    const run = await nestedRun({ hold: true, stop: (child) => child.kill("SIGTERM") });
    expect(run.marked, run.output).toBe(true);
    expect(run.running).toEqual([]);
    expect(run.left).toEqual([]);
  }, 120_000);

  it("leaves no server running and no temp folder behind after a run whose test left them", async () => {
    const run = await nestedRun({});
    expect(run.code, run.output).toBe(0);
    expect(run.running).toEqual([]);
    expect(run.left).toEqual([]);
  }, 120_000);
});

describe("the README", () => {
  it("gives in its first lines the install line that the missing-binary message gives", () => {
    const head = readFileSync(join(ROOT, "README.md"), "utf8").split("\n").slice(0, 10).join("\n");
    expect(head).toContain("apt-get install -y redis-server redis-sentinel nginx prometheus");
    expect(() => requireBinaries(["tollgate-no-such-binary"])).toThrow(
      "apt-get install -y redis-server redis-sentinel nginx prometheus",
    );
  });
});

describe("the test helpers", () => {
  it("remove nginx's prefix folder when nginx stops", async () => {
    const before = new Set(readdirSync(tmpdir()));
    const nginx = await startNginx({
      checkPort: await freePort(),
      publicPort: await freePort(),
      upstreamPort: await freePort(),
    });
    const made = readdirSync(tmpdir()).filter(
      (name) => !before.has(name) && name.startsWith("tollgate-nginx-"),
    );
    expect(made).toHaveLength(1);
    await nginx.stop();
    expect(readdirSync(tmpdir()).filter((name) => made.includes(name))).toEqual([]);
  });
});
