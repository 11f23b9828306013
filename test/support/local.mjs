// What the tests and the bench both need to run real servers on this machine: free loopback ports,
// waiting for a server to come up, and finding a server's binary (under CI a missing one fails).
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync } from "node:fs";
import { connect, createServer } from "node:net";
import { join } from "node:path";
import { writeNginxConfig } from "../../nginx/render.mjs";

/**
 * The packages that hold every server and shell the tests and the bench run (redis-cli comes with
 * redis-server, promtool with prometheus).
 */
const INSTALL = "apt-get update && apt-get install -y redis-server redis-sentinel nginx prometheus zsh";
/** Where a binary may be when it is not on PATH (Debian puts nginx in /usr/sbin). */
const KNOWN_PATHS = { nginx: ["/usr/sbin/nginx"] };

const missingMessage = (names) =>
  `${names.join(", ")} ${names.length === 1 ? "was" : "were"} not found on PATH. The tests and the bench ` +
  `run real servers, never mocks; install them with: ${INSTALL}` +
  (process.env.CI === "true" ? " (CI=true: a missing binary fails the run, it is never skipped)" : "");

/** An error that says all there is to say in its message: a stack would only hide it. */
function plainError(message) {
  const error = new Error(message);
  error.stack = message;
  return error;
}

function lookUp(name, extraPaths) {
  for (const path of [...extraPaths, ...(KNOWN_PATHS[name] ?? [])]) if (existsSync(path)) return path;
  try {
    return execFileSync("sh", ["-c", `command -v ${name}`], { encoding: "utf8" }).trim();
  } catch {
    return undefined;
  }
}

export function findBinary(name, extraPaths = []) {
  const found = lookUp(name, extraPaths);
  if (found === undefined) throw plainError(missingMessage([name]));
  return found;
}

/** Fails with one message naming every one of `names` that is missing, before anything starts. */
export function requireBinaries(names) {
  const missing = names.filter((name) => lookUp(name, []) === undefined);
  if (missing.length > 0) throw plainError(missingMessage(missing));
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

/**
 * Ports are taken from 15000-32767, below Linux's ephemeral range (32768-60999): a port the kernel
 * picked with listen(0) can, between our close and the server's own listen, become the local port of
 * any outgoing connection (the tests open thousands), and the server then fails with EADDRINUSE.
 * Each vitest worker draws from its own slice, and a process never hands out a port twice.
 */
const PORT_LOW = 15_000;
const PORT_HIGH = 32_767;
const SLICES = 8;
const handedOut = new Set();

function canListen(port) {
  return new Promise((resolve) => {
    const server = createServer();
    server.unref();
    server.once("error", () => resolve(false));
    server.listen(port, "127.0.0.1", () => server.close(() => resolve(true)));
  });
}

/** A loopback TCP port that nothing listens on now. */
export async function freePort() {
  const slice = Math.floor((PORT_HIGH - PORT_LOW + 1) / SLICES);
  const worker = Number(process.env.VITEST_POOL_ID ?? process.pid) % SLICES;
  const low = PORT_LOW + worker * slice;
  for (let attempt = 0; attempt < 200; attempt += 1) {
    const port = low + Math.floor(Math.random() * slice);
    if (handedOut.has(port)) continue;
    handedOut.add(port);
    if (await canListen(port)) return port;
  }
  throw new Error(`no free loopback port in ${low}-${low + slice - 1}`);
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

/** Whether something accepts TCP connections on a loopback port. */
export const portOpen = (port) =>
  new Promise((resolve) => {
    const socket = connect(port, "127.0.0.1");
    socket.on("connect", () => {
      socket.destroy();
      resolve(true);
    });
    socket.on("error", () => resolve(false));
  });

/**
 * Renders an nginx configuration into `prefix` (nginx/nginx.conf.template, or `template`) on a free
 * port, with the prefix's temp directory: what `nginx -p prefix -c conf -g 'daemon off;'` needs.
 * `apiKeyHeader`: tollgate's API_KEY_HEADER, when not the default; `apiKeyForward`: its API_KEY_FORWARD.
 */
export async function prepareNginx({
  prefix,
  template,
  workers = 1,
  checkTimeout,
  checkPort,
  publicPort,
  upstreamPort,
  apiKeyHeader,
  apiKeyForward,
}) {
  mkdirSync(join(prefix, "tmp"), { recursive: true });
  const port = await freePort();
  const conf = writeNginxConfig({
    dir: prefix,
    ...(template === undefined ? {} : { template }),
    values: {
      WORKERS: String(workers),
      CHECK_TIMEOUT: checkTimeout,
      PREFIX: prefix,
      LISTEN: `127.0.0.1:${port}`,
      CHECK_ADDR: `127.0.0.1:${checkPort}`,
      PUBLIC_ADDR: `127.0.0.1:${publicPort}`,
      UPSTREAM_ADDR: `127.0.0.1:${upstreamPort}`,
      ...(apiKeyHeader === undefined ? {} : { API_KEY_HEADER: apiKeyHeader }),
      ...(apiKeyForward === undefined ? {} : { API_KEY_FORWARD: String(apiKeyForward) }),
    },
  });
  const errorLog = () => {
    try {
      return readFileSync(join(prefix, "error.log"), "utf8");
    } catch {
      return "";
    }
  };
  return {
    port,
    binary: findBinary("nginx", ["/usr/sbin/nginx"]),
    args: ["-p", prefix, "-c", conf, "-g", "daemon off;"],
    errorLog,
  };
}

const UNESCAPE = { n: "\n", r: "\r", t: "\t", a: "\x07", b: "\b", '"': '"', "\\": "\\" };

/** One MONITOR line, `<time> [<db> <source>] "arg" ...`, as its arguments and source ("lua" in scripts). */
export function parseMonitorLine(line) {
  const head = /^(\d+\.\d+) \[\d+ ([^\]]+)\] /.exec(line);
  if (head === null) return undefined;
  const args = [];
  for (const match of line.slice(head[0].length).matchAll(/"((?:[^"\\]|\\.)*)"/g)) {
    args.push(
      (match[1] ?? "").replace(/\\(x[0-9a-fA-F]{2}|.)/g, (_, code) =>
        code.length === 3
          ? String.fromCharCode(Number.parseInt(code.slice(1), 16))
          : (UNESCAPE[code] ?? code),
      ),
    );
  }
  return { args, source: head[2] };
}

/** A command in RESP, the form Redis reads whatever its arguments hold. */
const resp = (...args) =>
  `*${args.length}\r\n${args.map((a) => `$${Buffer.byteLength(a)}\r\n${a}\r\n`).join("")}`;

/**
 * Watches every command a Redis receives (MONITOR) over a plain socket: ioredis's monitor mode can
 * fail with "Command queue state error" when the first lines arrive before its own connection
 * handshake is done. Resolves once Redis has confirmed MONITOR; `onCommand(args, source)` is called
 * for each command, with source "lua" for the commands a script ran.
 */
export function monitorRedis(url, onCommand) {
  const { hostname, port, username, password } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port || 6379), hostname || "127.0.0.1");
    let buffer = "";
    const auth =
      password === ""
        ? ""
        : resp("AUTH", decodeURIComponent(username || "default"), decodeURIComponent(password));
    // +OK for AUTH (when sent), then +OK for MONITOR; every later line is a command.
    let pendingOks = auth === "" ? 1 : 2;
    socket.setEncoding("latin1");
    socket.once("error", reject);
    socket.on("connect", () => socket.write(auth + resp("MONITOR")));
    socket.on("data", (chunk) => {
      buffer += chunk;
      for (let end = buffer.indexOf("\r\n"); end !== -1; end = buffer.indexOf("\r\n")) {
        const line = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        if (pendingOks > 0) {
          if (line !== "+OK") {
            socket.destroy();
            reject(new Error(`MONITOR refused: ${line}`));
            return;
          }
          pendingOks -= 1;
          if (pendingOks === 0) {
            socket.off("error", reject);
            socket.on("error", () => {});
            resolve({ close: () => socket.destroy() });
          }
          continue;
        }
        const parsed = parseMonitorLine(line.slice(1));
        if (parsed !== undefined) onCommand(parsed.args, parsed.source);
      }
    });
  });
}
