// `npm start` as a shell runs it in the background (`npm start &`): npm leads a process group of its
// own, the job, and tollgate is npm's child. The reload instructions of docs/operations.md must work
// there, and a signal to the whole job must never leave a tollgate running on without npm.
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { DEFAULT_POLICY_YAML } from "../../src/policy/policy.js";
import { waitFor } from "../support/ports.js";
import { freeTollgatePorts, type TollgatePorts, tollgateEnv } from "../support/processes.mjs";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const dir = mkdtempSync(join(tmpdir(), "tollgate-npm-start-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

type LogLine = { event?: string; pid?: number; changed?: boolean; msg?: string };

type Job = {
  npm: ChildProcess;
  ports: TollgatePorts;
  policyFile: string;
  lines(): LogLine[];
  output(): string;
  /** npm's exit: its code, or the signal it died of. */
  npmExit: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
};

/** `npm start &`: npm in a process group of its own (the shell's job), its output collected. */
async function npmStartJob(): Promise<Job> {
  const ports = await freeTollgatePorts();
  const policyFile = join(dir, `policy-${ports.port}.yaml`);
  writeFileSync(policyFile, DEFAULT_POLICY_YAML);
  const npm = spawn("npm", ["start"], {
    cwd: ROOT,
    env: {
      ...tollgateEnv(ports),
      HOME: process.env.HOME ?? dir,
      POLICY_FILE: policyFile,
      LOG_FORMAT: "json",
    },
    detached: true,
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  npm.stdout?.on("data", (d: Buffer) => {
    output += d.toString();
  });
  npm.stderr?.on("data", (d: Buffer) => {
    output += d.toString();
  });
  const npmExit = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    npm.once("exit", (code, signal) => resolve({ code, signal })),
  );
  const lines = (): LogLine[] =>
    output.split("\n").flatMap((line) => {
      try {
        return [JSON.parse(line) as LogLine];
      } catch {
        return [];
      }
    });
  return { npm, ports, policyFile, lines, output: () => output, npmExit };
}

/** Whether a process runs (a zombie waiting for its reaper does not). */
function running(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2)[0] !== "Z";
  } catch {
    return false;
  }
}

const accepts = (port: number): Promise<boolean> =>
  new Promise((resolve) => {
    const socket = connect(port, "127.0.0.1");
    socket.once("connect", () => {
      socket.destroy();
      resolve(true);
    });
    socket.once("error", () => resolve(false));
  });

async function readyPid(job: Job): Promise<number> {
  await waitFor(
    async () => job.lines().some((l) => l.event === "ready"),
    60_000,
    `npm start on ${job.ports.port}`,
  );
  const pid = job.lines().find((l) => l.event === "ready")?.pid as number;
  expect(pid).not.toBe(job.npm.pid);
  return pid;
}

/** A policy that differs from the built-in one, so that a reload reports a change. */
const changedPolicy = () => DEFAULT_POLICY_YAML.replace("search: 20/1h", "search: 25/1h");

const reloads = (job: Job) => job.lines().filter((l) => l.event === "policy_reloaded" && l.changed);

async function cleanUp(job: Job, pid: number | undefined): Promise<void> {
  for (const target of [-(job.npm.pid as number), pid]) {
    try {
      if (target !== undefined) process.kill(target, "SIGKILL");
    } catch {
      // gone already
    }
  }
}

describe("tollgate under `npm start &`", () => {
  it("reloads on kill -HUP of the pid its ready line gives, and the job stays whole until SIGINT stops it and frees the ports", async () => {
    const job = await npmStartJob();
    let pid: number | undefined;
    try {
      pid = await readyPid(job);
      expect(job.lines().find((l) => l.event === "ready")?.msg).toContain(`(pid ${pid})`);
      writeFileSync(job.policyFile, changedPolicy());
      process.kill(pid, "SIGHUP");
      await waitFor(async () => reloads(job).length === 1, 10_000, "the reload");
      // Longer than the parent watch's period: npm and tollgate both still run.
      await new Promise((r) => setTimeout(r, 1_000));
      expect(job.npm.exitCode).toBeNull();
      expect(running(pid)).toBe(true);
      expect(await accepts(job.ports.adminPort)).toBe(true);
      // Ctrl-C, or kill -INT %1: the whole job stops.
      process.kill(-(job.npm.pid as number), "SIGINT");
      await job.npmExit;
      const tollgate = pid;
      await waitFor(async () => !running(tollgate), 10_000, "tollgate's exit");
      for (const port of Object.values(job.ports)) expect(await accepts(port), `port ${port}`).toBe(false);
    } finally {
      await cleanUp(job, pid);
    }
  }, 90_000);

  it("on a SIGHUP to the whole job (kill -HUP %1), reloads, then stops with npm, which died of it: nothing runs on holding the ports", async () => {
    const job = await npmStartJob();
    let pid: number | undefined;
    try {
      pid = await readyPid(job);
      writeFileSync(job.policyFile, changedPolicy());
      process.kill(-(job.npm.pid as number), "SIGHUP");
      // npm forwards SIGINT and SIGTERM only: SIGHUP kills it.
      expect((await job.npmExit).signal).toBe("SIGHUP");
      const tollgate = pid;
      await waitFor(async () => !running(tollgate), 10_000, `tollgate's exit:\n${job.output()}`);
      expect(reloads(job)).toHaveLength(1);
      const gone = job.lines().find((l) => l.event === "parent_gone");
      expect(gone?.msg).toContain(`kill -HUP ${pid}`);
      expect(gone?.msg).toContain("POST /admin/policy/reload");
      expect(job.lines().some((l) => l.event === "stopped")).toBe(true);
      for (const port of Object.values(job.ports)) expect(await accepts(port), `port ${port}`).toBe(false);
    } finally {
      await cleanUp(job, pid);
    }
  }, 90_000);
});
