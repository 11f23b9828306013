// What the tests and the bench both need to run real servers on this machine: free loopback ports,
// waiting for a server to come up, and finding a server's binary (under CI a missing one fails).
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { createServer } from "node:net";

const INSTALL_HINT =
  "install it with: apt-get update && apt-get install -y redis-server redis-sentinel nginx";

export function findBinary(name, extraPaths = []) {
  for (const path of extraPaths) if (existsSync(path)) return path;
  try {
    return execFileSync("sh", ["-c", `command -v ${name}`], { encoding: "utf8" }).trim();
  } catch {
    throw new Error(
      `${name} was not found on PATH. The tests and the bench run a real ${name} (never a mock); ${INSTALL_HINT}` +
        (process.env.CI === "true" ? " (CI=true: a missing binary fails the run)" : ""),
    );
  }
}

/**
 * The arguments of a throwaway redis-server on loopback `port`: nothing written to disk, warnings
 * only in its log. A cluster node or a replica adds its own after these.
 */
export function redisServerArgs(port) {
  return [
    "--port",
    String(port),
    "--bind",
    "127.0.0.1",
    "--save",
    "",
    "--appendonly",
    "no",
    "--loglevel",
    "warning",
  ];
}

export function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.on("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      const port = typeof address === "object" && address !== null ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

/** Polls `check` every 25 ms until it holds; fails after `timeoutMs`, or at once when `proc` has exited. */
export async function waitFor(check, timeoutMs, what, proc) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (proc !== undefined && !proc.alive()) {
      throw new Error(`${what}: the process exited during start-up\n${proc.output()}`);
    }
    try {
      if (await check()) return;
    } catch {
      // not up yet
    }
    if (Date.now() > deadline) {
      throw new Error(
        `timed out after ${timeoutMs} ms waiting for ${what}${proc === undefined ? "" : `\n${proc.output()}`}`,
      );
    }
    await new Promise((r) => setTimeout(r, 25));
  }
}
