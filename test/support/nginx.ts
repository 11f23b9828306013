// Renders nginx/nginx.conf.template (local.mjs prepareNginx) with test ports and runs a real nginx in the
// foreground, in a prefix folder of its own that goes when it stops.
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { forget, removeOnExit, stopOnExit } from "./leftovers.mjs";
import { portOpen, prepareNginx, waitFor } from "./local.mjs";

export type NginxOptions = {
  checkPort: number;
  publicPort: number;
  upstreamPort: number;
  /** How long nginx waits for a check; tests on a loaded 2-core machine give it room. */
  checkTimeout?: string;
};
export type Nginx = { port: number; url: string; errorLog(): string; stop(): Promise<void> };

export async function startNginx(options: NginxOptions & { workers?: number }): Promise<Nginx> {
  const prefix = removeOnExit(mkdtempSync(join(tmpdir(), "tollgate-nginx-")));
  const removePrefix = () => {
    rmSync(prefix, { recursive: true, force: true });
    forget(prefix);
  };
  const { port, binary, args, errorLog } = await prepareNginx({
    prefix,
    workers: options.workers ?? 1,
    checkTimeout: options.checkTimeout ?? "5s",
    checkPort: options.checkPort,
    publicPort: options.publicPort,
    upstreamPort: options.upstreamPort,
  });
  const child: ChildProcess = stopOnExit(spawn(binary, args, { stdio: ["ignore", "ignore", "pipe"] }));
  let stderr = "";
  child.stderr?.on("data", (d: Buffer) => {
    stderr += d.toString();
  });
  try {
    await waitFor(() => portOpen(port), 10_000, `nginx on ${port}`);
  } catch (error) {
    const log = errorLog();
    await new Promise<void>((resolve) => {
      if (child.exitCode !== null || child.signalCode !== null) return resolve();
      child.once("exit", () => resolve());
      // SIGTERM, not SIGKILL: nginx's master then stops its workers too.
      child.kill("SIGTERM");
    });
    removePrefix();
    throw new Error(`${(error as Error).message}\n${stderr}\n${log}`);
  }
  return {
    port,
    url: `http://127.0.0.1:${port}`,
    errorLog,
    stop: async () => {
      await new Promise<void>((resolve) => {
        if (child.exitCode !== null || child.signalCode !== null) return resolve();
        child.once("exit", () => resolve());
        child.kill("SIGQUIT");
      });
      removePrefix();
    },
  };
}
