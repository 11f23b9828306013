// Renders nginx/nginx.conf.template (nginx/render.mjs) with test ports and runs a real nginx in the foreground.
import { type ChildProcess, spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync } from "node:fs";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { writeNginxConfig } from "../../nginx/render.mjs";
import { findBinary } from "./binaries.js";
import { freePort, waitFor } from "./ports.js";

export type NginxOptions = {
  checkPort: number;
  publicPort: number;
  upstreamPort: number;
  /** How long nginx waits for a check; tests on a loaded 2-core machine give it room. */
  checkTimeout?: string;
};
export type Nginx = { port: number; url: string; errorLog(): string; stop(): Promise<void> };

const portOpen = (port: number): Promise<boolean> =>
  new Promise((resolve) => {
    const socket = connect(port, "127.0.0.1");
    socket.on("connect", () => {
      socket.destroy();
      resolve(true);
    });
    socket.on("error", () => resolve(false));
  });

export async function startNginx(options: NginxOptions & { workers?: number }): Promise<Nginx> {
  const binary = findBinary("nginx", ["/usr/sbin/nginx"]);
  const prefix = mkdtempSync(join(tmpdir(), "tollgate-nginx-"));
  mkdirSync(join(prefix, "tmp"));
  const port = await freePort();
  const conf = writeNginxConfig({
    dir: prefix,
    values: {
      WORKERS: String(options.workers ?? 1),
      CHECK_TIMEOUT: options.checkTimeout ?? "5s",
      PREFIX: prefix,
      LISTEN: `127.0.0.1:${port}`,
      CHECK_ADDR: `127.0.0.1:${options.checkPort}`,
      PUBLIC_ADDR: `127.0.0.1:${options.publicPort}`,
      UPSTREAM_ADDR: `127.0.0.1:${options.upstreamPort}`,
    },
  });
  const child: ChildProcess = spawn(binary, ["-p", prefix, "-c", conf, "-g", "daemon off;"], {
    stdio: ["ignore", "ignore", "pipe"],
  });
  let stderr = "";
  child.stderr?.on("data", (d: Buffer) => {
    stderr += d.toString();
  });
  const errorLog = (): string => {
    try {
      return readFileSync(join(prefix, "error.log"), "utf8");
    } catch {
      return "";
    }
  };
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
