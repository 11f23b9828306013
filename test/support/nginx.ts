// Renders nginx/nginx.conf.template (local.mjs prepareNginx) with test ports and runs a real nginx in the foreground.
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
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
  const { port, binary, args, errorLog } = await prepareNginx({
    prefix: mkdtempSync(join(tmpdir(), "tollgate-nginx-")),
    workers: options.workers ?? 1,
    checkTimeout: options.checkTimeout ?? "5s",
    checkPort: options.checkPort,
    publicPort: options.publicPort,
    upstreamPort: options.upstreamPort,
  });
  const child: ChildProcess = spawn(binary, args, { stdio: ["ignore", "ignore", "pipe"] });
  let stderr = "";
  child.stderr?.on("data", (d: Buffer) => {
    stderr += d.toString();
  });
  try {
    await waitFor(() => portOpen(port), 10_000, `nginx on ${port}`);
  } catch (error) {
    child.kill("SIGKILL");
    throw new Error(`${(error as Error).message}\n${stderr}\n${errorLog()}`);
  }
  return {
    port,
    url: `http://127.0.0.1:${port}`,
    errorLog,
    stop: () =>
      new Promise<void>((resolve) => {
        if (child.exitCode !== null) return resolve();
        child.once("exit", () => resolve());
        child.kill("SIGQUIT");
      }),
  };
}
