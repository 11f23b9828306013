// Runs the real tollgate and upstream processes (built in dist/) on free ports for end-to-end tests.
import { type ChildProcess, spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { stopOnExit } from "./leftovers.mjs";
import { freePort, httpOk, waitFor } from "./local.mjs";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));

export type RunningProcess = {
  child: ChildProcess;
  /** Everything the process wrote to stdout and stderr so far. */
  output(): string;
  /** Sends a signal and resolves with the exit code. */
  stop(signal?: NodeJS.Signals): Promise<number | null>;
};

function run(script: string, env: Record<string, string>): RunningProcess {
  const child = stopOnExit(
    spawn(process.execPath, [script], {
      cwd: ROOT,
      env: { PATH: process.env.PATH ?? "", ...env },
      stdio: ["ignore", "pipe", "pipe"],
    }),
  );
  let output = "";
  child.stdout?.on("data", (d: Buffer) => {
    output += d.toString();
  });
  child.stderr?.on("data", (d: Buffer) => {
    output += d.toString();
  });
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  return {
    child,
    output: () => output,
    async stop(signal = "SIGTERM") {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      return exited;
    },
  };
}

export type TollgateProcess = RunningProcess & {
  port: number;
  checkPort: number;
  adminPort: number;
  url: string;
  checkUrl: string;
  adminUrl: string;
  adminToken: string;
};

export const TEST_JWT_SECRET = "test-jwt-secret-0123456789-abcdefghij";
export const TEST_ADMIN_TOKEN = "test-admin-token-0123456789-abcdefghij";

export type TollgatePorts = { port: number; checkPort: number; adminPort: number };

/** Free loopback ports for tollgate's public, check and admin listeners. */
export async function freeTollgatePorts(): Promise<TollgatePorts> {
  return { port: await freePort(), checkPort: await freePort(), adminPort: await freePort() };
}

/**
 * The settings every tollgate a test spawns starts from: its listeners on loopback, the test secrets,
 * no drain delay (tests stop processes at once), and never a developer's .env.
 */
export function testTollgateEnv({ port, checkPort, adminPort }: TollgatePorts): Record<string, string> {
  return {
    PATH: process.env.PATH ?? "",
    HOST: "127.0.0.1",
    PORT: String(port),
    CHECK_PORT: String(checkPort),
    ADMIN_PORT: String(adminPort),
    JWT_SECRET: TEST_JWT_SECRET,
    ADMIN_TOKEN: TEST_ADMIN_TOKEN,
    DRAIN_DELAY_MS: "0",
    ENV_FILE: "",
  };
}

/**
 * Starts `node dist/src/main.js` and waits until it is ready (listening, users loaded). `readyMs` is
 * how long start-up may take (WORKERS=2 starts, and hashes the demo passwords, twice).
 */
export async function startTollgate(
  env: Record<string, string> = {},
  readyMs = 15_000,
): Promise<TollgateProcess> {
  const ports = await freeTollgatePorts();
  const { port, checkPort, adminPort } = ports;
  const proc = run("dist/src/main.js", { ...testTollgateEnv(ports), LOG_LEVEL: "info", ...env });
  const url = `http://127.0.0.1:${port}`;
  try {
    // /ready answers 200 once every listener accepts and the users are loaded.
    await waitFor(() => httpOk(`${url}/ready`), readyMs, `tollgate on ${port}`);
  } catch (error) {
    await proc.stop("SIGKILL");
    throw new Error(`${(error as Error).message}\n${proc.output()}`);
  }
  return {
    ...proc,
    port,
    checkPort,
    adminPort,
    url,
    checkUrl: `http://127.0.0.1:${checkPort}`,
    adminUrl: `http://127.0.0.1:${adminPort}`,
    adminToken: env.ADMIN_TOKEN ?? TEST_ADMIN_TOKEN,
  };
}

export type UpstreamProcess = RunningProcess & { port: number; url: string };

export async function startUpstream(): Promise<UpstreamProcess> {
  const port = await freePort();
  const proc = run("dist/upstream/main.js", { HOST: "127.0.0.1", UPSTREAM_PORT: String(port) });
  const url = `http://127.0.0.1:${port}`;
  await waitFor(() => httpOk(`${url}/health`), 10_000, `upstream on ${port}`);
  return { ...proc, port, url };
}

/** Logs in through `baseUrl` and returns the parsed body. */
export async function login(
  baseUrl: string,
  username: string,
  password = "secret",
  headers: Record<string, string> = {},
): Promise<{ access_token: string; session_id: string; user_id: string; tier: string }> {
  const res = await fetch(`${baseUrl}/auth/login`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify({ username, password }),
  });
  if (res.status !== 200) throw new Error(`login of ${username} failed: ${res.status} ${await res.text()}`);
  return (await res.json()) as { access_token: string; session_id: string; user_id: string; tier: string };
}
