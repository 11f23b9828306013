// What a first start tells its user: a setting the machine or the server refuses stops start-up
// with one line naming the setting, and nothing is left running.
import { spawn } from "node:child_process";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { freeTollgatePorts, testTollgateEnv } from "../support/processes.js";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));

type Exit = { code: number | null; stdout: string; stderr: string };

/** Runs `node dist/src/main.js` until it exits by itself (or `limitMs` pass, which fails the test). */
async function runToExit(env: Record<string, string>, limitMs = 20_000): Promise<Exit> {
  const child = spawn(process.execPath, ["dist/src/main.js"], {
    cwd: ROOT,
    env: { ...testTollgateEnv(await freeTollgatePorts()), LOG_FORMAT: "json", ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (d: Buffer) => {
    stdout += d.toString();
  });
  child.stderr.on("data", (d: Buffer) => {
    stderr += d.toString();
  });
  const code = await new Promise<number | null>((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`still running after ${limitMs} ms:\n${stdout}${stderr}`));
    }, limitMs);
    child.once("exit", (exitCode) => {
      clearTimeout(timer);
      resolve(exitCode);
    });
  });
  return { code, stdout, stderr };
}

/** A loopback port held by another server while `body` runs. */
async function withTakenPort<T>(body: (port: number) => Promise<T>): Promise<T> {
  const taken = createServer();
  await new Promise<void>((resolve) => taken.listen(0, "127.0.0.1", resolve));
  try {
    return await body((taken.address() as AddressInfo).port);
  } finally {
    taken.close();
  }
}

describe("a port already in use", () => {
  it.each([
    ["PORT", "port"],
    ["CHECK_PORT", "checkPort"],
    ["ADMIN_PORT", "adminPort"],
  ] as const)("stops start-up with exit 1 and one line naming %s", async (name, field) => {
    const exit = await withTakenPort(async (port) => {
      const ports = { ...(await freeTollgatePorts()), [field]: port };
      return { port, ...(await runToExit(testTollgateEnv(ports))) };
    });
    expect(exit.code, exit.stderr).toBe(1);
    expect(exit.stderr).toContain(`tollgate: ${name}: ${exit.port} is in use on 127.0.0.1`);
    expect(exit.stderr).not.toMatch(/EADDRINUSE|\n\s+at /);
  });
});
