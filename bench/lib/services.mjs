// Starts the services under test on free loopback ports: redis-server, tollgate, the upstream, nginx, ceilings.
import { join } from "node:path";
import {
  findBinary,
  freePort,
  httpOk,
  portOpen,
  prepareNginx,
  ROOT,
  redisServerArgs,
  startProcess,
  waitFor,
} from "./processes.mjs";

const BENCH_DIR = join(ROOT, "bench");

export const JWT_SECRET = "bench-jwt-secret-0123456789-abcdefghijklmnop";
export const ADMIN_TOKEN = "bench-admin-token-0123456789-abcdefghijklmnop";
export const KEY_PREFIX = "bench:";

export async function startRedis() {
  const port = await freePort();
  const proc = startProcess({
    name: "redis-server",
    command: findBinary("redis-server"),
    args: redisServerArgs(port),
    emergencySignal: "SIGTERM",
  });
  await waitFor(() => portOpen(port), 10_000, `redis-server on ${port}`, proc);
  return { proc, port, url: `redis://127.0.0.1:${port}` };
}

/**
 * `node dist/src/main.js`, ready once it answers and the demo users are loaded; with `workers`, once
 * every worker has logged that it listens.
 */
export async function startTollgate({
  redisUrl,
  /** Instead of REDIS_URL: REDIS_CLUSTER_NODES, or REDIS_SENTINELS and REDIS_SENTINEL_MASTER. */
  redisEnv = { REDIS_URL: redisUrl },
  policyFile,
  main = "dist/src/main.js",
  nodeArgs = [],
  name = "tollgate",
  workers,
  /** More settings, e.g. DENIAL_CACHE_SIZE. */
  env = {},
}) {
  const [port, checkPort, adminPort] = [await freePort(), await freePort(), await freePort()];
  const proc = startProcess({
    name,
    command: process.execPath,
    args: [...nodeArgs, main],
    env: {
      HOST: "127.0.0.1",
      PORT: String(port),
      CHECK_PORT: String(checkPort),
      ADMIN_PORT: String(adminPort),
      ...redisEnv,
      REDIS_KEY_PREFIX: KEY_PREFIX,
      JWT_SECRET,
      ADMIN_TOKEN,
      POLICY_FILE: policyFile,
      // Info for the workers' "ready" lines; nothing on the check path logs at info when it allows.
      LOG_LEVEL: workers === undefined ? "warn" : "info",
      ...(workers === undefined ? {} : { WORKERS: String(workers) }),
      DRAIN_DELAY_MS: "0",
      ENV_FILE: "",
      ...env,
    },
  });
  const url = `http://127.0.0.1:${port}`;
  const adminUrl = `http://127.0.0.1:${adminPort}`;
  // /ready alone would do for this build; the demo user check also covers older builds given by --tollgate.
  const ready = async () =>
    (await httpOk(`${url}/ready`)) &&
    (await httpOk(`${adminUrl}/admin/users/demo-alice/sessions`, { authorization: `Bearer ${ADMIN_TOKEN}` }));
  const started = () =>
    proc
      .output()
      .split("\n")
      .filter((line) => line.includes('"event":"ready"')).length;
  await waitFor(
    async () => (await ready()) && (workers === undefined || started() >= workers),
    30_000,
    `${name} on ${port}`,
    proc,
  );
  return { proc, port, checkPort, adminPort, url, checkUrl: `http://127.0.0.1:${checkPort}`, adminUrl };
}

export async function startUpstream() {
  const port = await freePort();
  const proc = startProcess({
    name: "upstream",
    command: process.execPath,
    args: ["dist/upstream/main.js"],
    env: { HOST: "127.0.0.1", UPSTREAM_PORT: String(port) },
  });
  await waitFor(() => httpOk(`http://127.0.0.1:${port}/health`), 10_000, `upstream on ${port}`, proc);
  return { proc, port };
}

/** bench/ceiling-server.mjs: bare node:http ("http"), + one EVALSHA ("store"), + INCR/PEXPIRE ("fixed"). */
export async function startCeiling(mode, env = {}, name = `${mode} ceiling`) {
  const port = await freePort();
  const proc = startProcess({
    name,
    command: process.execPath,
    args: [join(BENCH_DIR, "ceiling-server.mjs"), mode],
    env: { HOST: "127.0.0.1", PORT: String(port), ...env },
  });
  await waitFor(() => httpOk(`http://127.0.0.1:${port}/`), 10_000, `${mode} ceiling on ${port}`, proc);
  return { proc, port, url: `http://127.0.0.1:${port}` };
}

/**
 * nginx in the foreground from a rendered template: "tollgate" is nginx/nginx.conf.template (auth_request
 * to tollgate), "direct" is bench/nginx-direct.conf.template (a plain reverse proxy to the upstream).
 */
export async function startNginx({ kind, dir, workers, checkPort, publicPort, upstreamPort }) {
  const { port, binary, args, errorLog } = await prepareNginx({
    prefix: join(dir, `nginx-${kind}`),
    ...(kind === "tollgate" ? {} : { template: join(BENCH_DIR, "nginx-direct.conf.template") }),
    workers,
    // The production value docs/nginx.md recommends (above tollgate's REDIS_TIMEOUT_MS).
    checkTimeout: "1s",
    checkPort,
    publicPort,
    upstreamPort,
  });
  const proc = startProcess({
    name: `nginx (${kind})`,
    command: binary,
    args,
    stopSignal: "SIGQUIT",
    emergencySignal: "SIGTERM",
  });
  try {
    await waitFor(() => portOpen(port), 10_000, `nginx (${kind}) on ${port}`, proc);
  } catch (error) {
    throw new Error(`${error.message}\n${errorLog()}`);
  }
  return { proc, port, url: `http://127.0.0.1:${port}`, errorLog };
}

/** POST /auth/login on tollgate's public port. */
/** Creates a user through the admin API (the bench's admin token), for a tier of the bench's own. */
export async function createUser(adminUrl, username, tier, password = "bench-password") {
  const res = await fetch(`${adminUrl}/admin/users`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${ADMIN_TOKEN}` },
    body: JSON.stringify({ username, password, tier }),
  });
  const text = await res.text();
  if (res.status !== 201 && res.status !== 409)
    throw new Error(`creating ${username} failed: ${res.status} ${text}`);
  return password;
}

export async function login(url, username, password = "secret") {
  const res = await fetch(`${url}/auth/login`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ username, password }),
  });
  const text = await res.text();
  if (res.status !== 200) throw new Error(`login of ${username} failed: ${res.status} ${text}`);
  return JSON.parse(text);
}

/** The sum of tollgate's decision, degraded and store-error counters, from ADMIN_PORT /metrics. */
export async function tollgateCounters(adminUrl) {
  const res = await fetch(`${adminUrl}/metrics`);
  const text = await res.text();
  if (res.status !== 200) throw new Error(`tollgate /metrics answered ${res.status}`);
  const sum = (name) => {
    let total = 0;
    for (const line of text.split("\n")) {
      if (line.startsWith(`${name}{`) || line.startsWith(`${name} `)) total += Number(line.split(" ").pop());
    }
    return total;
  };
  return {
    decisions: sum("tollgate_decisions_total"),
    degraded: sum("tollgate_degraded_total"),
    storeErrors: sum("tollgate_store_errors_total"),
  };
}
