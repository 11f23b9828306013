// The processes of one bench run: every child is tracked, and all of them are stopped on any way out.
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";

export const ROOT = fileURLToPath(new URL("../../", import.meta.url));

/** @type {Set<RunningProcess>} */
const running = new Set();

/**
 * @typedef {object} RunningProcess
 * @property {string} name
 * @property {import("node:child_process").ChildProcess} child
 * @property {() => string} output the last 64 KB the process wrote to stdout and stderr
 * @property {() => boolean} alive
 * @property {(timeoutMs?: number) => Promise<void>} stop graceful signal, then SIGKILL after the timeout
 */

export {
  findBinary,
  freePort,
  httpOk,
  monitorRedis,
  portOpen,
  prepareNginx,
  redisServerArgs,
  waitFor,
} from "../../test/support/local.mjs";

/**
 * Spawns a tracked child. `stopSignal` asks it to stop; `emergencySignal` is what a dying bench sends
 * synchronously from its exit handler (nginx needs SIGTERM there, so that its master stops the workers).
 * @returns {RunningProcess}
 */
export function startProcess({
  name,
  command,
  args,
  env,
  stopSignal = "SIGTERM",
  emergencySignal = "SIGKILL",
}) {
  const child = spawn(command, args, {
    cwd: ROOT,
    env: { PATH: process.env.PATH ?? "", ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  const keep = (data) => {
    output = (output + data.toString()).slice(-65_536);
  };
  child.stdout.on("data", keep);
  child.stderr.on("data", keep);
  let exited = false;
  const done = new Promise((resolve) => {
    child.once("close", () => {
      exited = true;
      resolve();
    });
  });
  child.on("error", (error) => keep(`\n[${name}] ${error.message}\n`));
  const proc = {
    name,
    child,
    emergencySignal,
    output: () => output,
    alive: () => !exited && child.exitCode === null && child.signalCode === null,
    async stop(timeoutMs = 5_000) {
      if (!proc.alive()) return;
      child.kill(stopSignal);
      const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
      await done;
      clearTimeout(timer);
    },
  };
  running.add(proc);
  void done.then(() => running.delete(proc));
  return proc;
}

/** Labels of the running children by pid, for the CPU figures. */
export function trackedNames() {
  return new Map([...running].map((proc) => [proc.child.pid, proc.name]));
}

/** Stops every child still running, newest first (proxies before their backends). */
export async function stopAll() {
  for (const proc of [...running].reverse()) await proc.stop();
}

let installed = false;

/** On any exit, a signal or a crash, no child outlives the bench. */
export function installExitHandlers() {
  if (installed) return;
  installed = true;
  process.on("exit", () => {
    for (const proc of running) {
      try {
        proc.child.kill(proc.emergencySignal);
      } catch {
        // already gone
      }
    }
  });
  for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"]) {
    process.once(signal, () => {
      process.stderr.write(`\nbench: ${signal}: stopping its processes\n`);
      void stopAll().finally(() => process.exit(130));
    });
  }
}
