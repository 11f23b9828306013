// The servers the tests and the bench run for real, each on free loopback ports: redis-server, tollgate
// (dist/src/main.js), the upstream (dist/upstream/main.js) and nginx. Every child is tracked: stopped
// however this process ends (leftovers.mjs), named for the bench's CPU figures, and stopped by stopAll.
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { httpOk } from "./http-client.mjs";
import { forget, removeOnExit, stopOnExit } from "./leftovers.mjs";
import { findBinary, freePort, portOpen, prepareNginx, redisServerArgs, waitFor } from "./local.mjs";
import { ADMIN_TOKEN, JWT_SECRET } from "./secrets.mjs";

export const ROOT = fileURLToPath(new URL("../../", import.meta.url));

/** The most of its output a process keeps, its last bytes: enough for any test, bounded for the bench. */
const KEPT_OUTPUT = 8 * 1024 * 1024;

const running = new Set();

/**
 * Spawns a tracked child in the repository's folder, its output kept. `stopSignal` is what stop()
 * sends unless told; `exitSignal` is what this process sends it, synchronously, if it ends first
 * (SIGTERM stops every server here at once, nginx's workers included).
 */
export function startProcess({
  name,
  command,
  args = [],
  env = {},
  cwd = ROOT,
  stopSignal = "SIGTERM",
  exitSignal = "SIGTERM",
}) {
  const child = stopOnExit(
    spawn(command, args, {
      cwd,
      env: { PATH: process.env.PATH ?? "", ...env },
      stdio: ["ignore", "pipe", "pipe"],
    }),
    exitSignal,
  );
  let output = "";
  const keep = (data) => {
    output += data.toString();
    if (output.length > KEPT_OUTPUT) output = output.slice(-KEPT_OUTPUT);
  };
  child.stdout.on("data", keep);
  child.stderr.on("data", keep);
  const exited = new Promise((resolve) => {
    child.once("exit", (code) => resolve(code));
    // A child that could not be spawned at all never exits.
    child.once("error", (error) => {
      keep(`\n[${name}] ${error.message}\n`);
      if (child.pid === undefined) resolve(null);
    });
  });
  const alive = () => child.pid !== undefined && child.exitCode === null && child.signalCode === null;
  const proc = {
    name,
    child,
    output: () => output,
    alive,
    async stop(signal = stopSignal, killAfterMs = undefined) {
      if (alive()) child.kill(signal);
      const timer =
        killAfterMs === undefined ? undefined : setTimeout(() => child.kill("SIGKILL"), killAfterMs);
      const code = await exited;
      clearTimeout(timer);
      return code;
    },
  };
  running.add(proc);
  void exited.then(() => running.delete(proc));
  return proc;
}

/** Waits for `ready`; a start that fails or times out leaves nothing running. */
async function started(proc, ready, timeoutMs, what) {
  try {
    await waitFor(ready, timeoutMs, what, proc);
  } catch (error) {
    await proc.stop("SIGKILL");
    throw error;
  }
}

/** The names of the running children by pid, for the CPU figures. */
export function trackedNames() {
  return new Map([...running].map((proc) => [proc.child.pid, proc.name]));
}

/** Stops every child still running, newest first (proxies before their backends), killing a slow one. */
export async function stopAll(killAfterMs = 5_000) {
  for (const proc of [...running].reverse()) await proc.stop(undefined, killAfterMs);
}

let onSignals = false;

/** SIGINT, SIGTERM or SIGHUP stop every child (stopAll), then this process with exit code 130. */
export function stopAllOnSignals(label) {
  if (onSignals) return;
  onSignals = true;
  for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"]) {
    process.once(signal, () => {
      process.stderr.write(`\n${label}: ${signal}: stopping its processes\n`);
      void stopAll().finally(() => process.exit(130));
    });
  }
}

function ping(port) {
  return new Promise((resolve) => {
    const socket = connect(port, "127.0.0.1");
    socket.setTimeout(500);
    socket.on("connect", () => socket.write("PING\r\n"));
    socket.on("data", (data) => {
      resolve(data.toString().startsWith("+PONG"));
      socket.destroy();
    });
    socket.on("error", () => resolve(false));
    socket.on("timeout", () => {
      resolve(false);
      socket.destroy();
    });
  });
}

/** A throwaway redis-server (redisServerArgs), on `port` or a free one, up once it answers PING. */
export async function startRedisServer({ port: given, name = "redis-server" } = {}) {
  const binary = findBinary("redis-server");
  const port = given ?? (await freePort());
  let proc;
  const launch = async () => {
    proc = startProcess({ name, command: binary, args: redisServerArgs(port) });
    await started(proc, () => ping(port), 10_000, `redis-server on port ${port}`);
  };
  const halt = async (signal) => {
    const current = proc;
    proc = undefined;
    await current?.stop(signal);
  };
  await launch();
  return {
    port,
    url: `redis://127.0.0.1:${port}`,
    process: () => proc,
    kill: () => halt("SIGKILL"),
    restart: launch,
    stop: () => halt("SIGTERM"),
  };
}

/** Free loopback ports for tollgate's public, check, admin and gRPC listeners. */
export async function freeTollgatePorts() {
  return {
    port: await freePort(),
    checkPort: await freePort(),
    adminPort: await freePort(),
    grpcPort: await freePort(),
  };
}

/**
 * The settings every tollgate the tests and the bench spawn starts from: its listeners on loopback, the
 * shared secrets (secrets.mjs), no drain delay (processes are stopped at once), and never a developer's .env.
 */
export function tollgateEnv({ port, checkPort, adminPort, grpcPort }) {
  return {
    PATH: process.env.PATH ?? "",
    HOST: "127.0.0.1",
    PORT: String(port),
    CHECK_PORT: String(checkPort),
    ADMIN_PORT: String(adminPort),
    ...(grpcPort === undefined ? {} : { GRPC_PORT: String(grpcPort) }),
    JWT_SECRET,
    ADMIN_TOKEN,
    DRAIN_DELAY_MS: "0",
    ENV_FILE: "",
  };
}

/**
 * `node [nodeArgs] dist/src/main.js` (or `main`) on free ports, with LOG_LEVEL=info and `env` over
 * tollgateEnv; ready once /ready answers (listening, users loaded), within `readyMs`. `workers`: with
 * WORKERS=n, also once each worker has logged that it listens. `waitForDemoUsers`: also once the
 * admin API knows demo-alice (builds older than /ready's wait for the users).
 */
export async function startTollgate(
  env = {},
  {
    readyMs = 15_000,
    main = "dist/src/main.js",
    nodeArgs = [],
    name = "tollgate",
    workers,
    waitForDemoUsers = false,
  } = {},
) {
  const ports = await freeTollgatePorts();
  const { port, checkPort, adminPort, grpcPort } = ports;
  const proc = startProcess({
    name,
    command: process.execPath,
    args: [...nodeArgs, main],
    env: {
      ...tollgateEnv(ports),
      LOG_LEVEL: "info",
      ...(workers === undefined ? {} : { WORKERS: String(workers) }),
      ...env,
    },
  });
  const url = `http://127.0.0.1:${port}`;
  const adminUrl = `http://127.0.0.1:${adminPort}`;
  const adminToken = env.ADMIN_TOKEN ?? ADMIN_TOKEN;
  const workersReady = () =>
    proc
      .output()
      .split("\n")
      .filter((line) => line.includes('"event":"ready"')).length >= (workers ?? 0);
  const ready = async () =>
    (await httpOk(`${url}/ready`)) &&
    (!waitForDemoUsers ||
      (await httpOk(`${adminUrl}/admin/users/demo-alice/sessions`, {
        authorization: `Bearer ${adminToken}`,
      }))) &&
    workersReady();
  await started(proc, ready, readyMs, `${name} on ${port}`);
  return {
    ...proc,
    port,
    checkPort,
    adminPort,
    grpcPort,
    url,
    checkUrl: `http://127.0.0.1:${checkPort}`,
    grpcUrl: `http://127.0.0.1:${grpcPort}`,
    adminUrl,
    adminToken,
  };
}

/** dist/upstream/main.js on a free port, ready once /health answers. */
export async function startUpstream() {
  const port = await freePort();
  const proc = startProcess({
    name: "upstream",
    command: process.execPath,
    args: ["dist/upstream/main.js"],
    env: { HOST: "127.0.0.1", UPSTREAM_PORT: String(port) },
  });
  const url = `http://127.0.0.1:${port}`;
  await started(proc, () => httpOk(`${url}/health`), 10_000, `upstream on ${port}`);
  return { ...proc, port, url };
}

/**
 * nginx in the foreground from nginx/nginx.conf.template (or `template`) rendered into `prefix`, or into
 * a temp folder of its own that goes when it stops. stop() asks for a graceful stop (SIGQUIT).
 */
export async function startNginx({
  checkPort,
  publicPort,
  upstreamPort,
  workers = 1,
  // How long nginx waits for a check; tests on a loaded 2-core machine give it room.
  checkTimeout = "5s",
  template,
  prefix: given,
  name = "nginx",
  apiKeyHeader,
  apiKeyForward,
}) {
  const prefix = given ?? removeOnExit(mkdtempSync(join(tmpdir(), "tollgate-nginx-")));
  const removePrefix = () => {
    if (given !== undefined) return;
    rmSync(prefix, { recursive: true, force: true });
    forget(prefix);
  };
  const { port, binary, args, errorLog } = await prepareNginx({
    prefix,
    ...(template === undefined ? {} : { template }),
    workers,
    checkTimeout,
    checkPort,
    publicPort,
    upstreamPort,
    apiKeyHeader,
    apiKeyForward,
  });
  const proc = startProcess({ name, command: binary, args, stopSignal: "SIGQUIT" });
  try {
    await waitFor(() => portOpen(port), 10_000, `${name} on ${port}`, proc);
  } catch (error) {
    // SIGTERM, not SIGKILL: nginx's master then stops its workers too.
    await proc.stop("SIGTERM");
    const log = errorLog();
    removePrefix();
    throw new Error(`${error.message}\n${log}`);
  }
  return {
    ...proc,
    port,
    url: `http://127.0.0.1:${port}`,
    errorLog,
    async stop(signal, killAfterMs) {
      const code = await proc.stop(signal, killAfterMs);
      removePrefix();
      return code;
    },
  };
}
