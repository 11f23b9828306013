// The servers and temp folders a test process (or the bench) made, stopped and removed however it ends:
// a test that failed before its afterAll, a setup that threw halfway, a worker ended by vitest, vitest
// stopped, or a bench that crashed.
import { rmSync } from "node:fs";

/** Each child still to stop, with the signal that stops it at once. */
const children = new Map();
const folders = new Set();

/**
 * Its signal to every child still running (SIGTERM unless told: redis-server, redis-sentinel, nginx and
 * tollgate all stop on it at once) and every folder removed. Synchronous, since it runs on the way out.
 */
function reap() {
  for (const [child, signal] of children) {
    if (child.exitCode !== null || child.signalCode !== null) continue;
    try {
      child.kill(signal);
    } catch {
      // gone meanwhile
    }
  }
  children.clear();
  for (const folder of folders) rmSync(folder, { recursive: true, force: true });
  folders.clear();
}

let hooked = false;

function hook() {
  if (hooked) return;
  hooked = true;
  process.once("exit", reap);
  // vitest's main process turns SIGINT and SIGTERM into an exit of its own. Its workers (forked, with
  // an IPC channel) are ended with SIGTERM, which would end them without an "exit" event: reap,
  // then let the signal do what it would have done.
  if (process.send === undefined) return;
  for (const signal of ["SIGINT", "SIGTERM"]) {
    process.once(signal, () => {
      reap();
      process.kill(process.pid, signal);
    });
  }
  // The channel closes only when vitest's main process is gone (it ends a worker with SIGTERM): a
  // worker left running a test for nobody stops as it would have been stopped.
  process.once("disconnect", () => process.kill(process.pid, "SIGTERM"));
}

/** Stops `child` with `signal` when this process ends, unless it has stopped by then. */
export function stopOnExit(child, signal = "SIGTERM") {
  hook();
  children.set(child, signal);
  child.once("exit", () => children.delete(child));
  return child;
}

/** Removes `folder` (and everything in it) when this process ends, unless `forget` was called. */
export function removeOnExit(folder) {
  hook();
  folders.add(folder);
  return folder;
}

/** A folder removed by its owner: nothing left to do on the way out. */
export function forget(folder) {
  folders.delete(folder);
}
