// The servers and temp folders a test process made, stopped and removed however it ends: a test that
// failed before its afterAll, a setup that threw halfway, a worker ended by vitest, or vitest stopped.
import type { ChildProcess } from "node:child_process";
import { rmSync } from "node:fs";

const children = new Set<ChildProcess>();
const folders = new Set<string>();

/**
 * SIGTERM to every child still running (redis-server, redis-sentinel, nginx and tollgate all stop
 * on it at once) and every folder removed. Synchronous, since it runs on the way out.
 */
function reap(): void {
  for (const child of children) {
    if (child.exitCode !== null || child.signalCode !== null) continue;
    try {
      child.kill("SIGTERM");
    } catch {
      // gone meanwhile
    }
  }
  children.clear();
  for (const folder of folders) rmSync(folder, { recursive: true, force: true });
  folders.clear();
}

let hooked = false;

function hook(): void {
  if (hooked) return;
  hooked = true;
  process.once("exit", reap);
  // vitest's main process turns SIGINT and SIGTERM into an exit of its own. Its workers (forked, with
  // an IPC channel) are ended with SIGTERM, which would end them without an "exit" event: reap,
  // then let the signal do what it would have done.
  if (process.send === undefined) return;
  for (const signal of ["SIGINT", "SIGTERM"] as const) {
    process.once(signal, () => {
      reap();
      process.kill(process.pid, signal);
    });
  }
  // The channel closes only when vitest's main process is gone (it ends a worker with SIGTERM): a
  // worker left running a test for nobody stops as it would have been stopped.
  process.once("disconnect", () => process.kill(process.pid, "SIGTERM"));
}

/** Stops `child` when this process ends, unless it has stopped by then. */
export function stopOnExit<T extends ChildProcess>(child: T): T {
  hook();
  children.add(child);
  child.once("exit", () => children.delete(child));
  return child;
}

/** Removes `folder` (and everything in it) when this process ends, unless `forget` was called. */
export function removeOnExit(folder: string): string {
  hook();
  folders.add(folder);
  return folder;
}

/** A folder removed by its owner: nothing left to do on the way out. */
export function forget(folder: string): void {
  folders.delete(folder);
}
