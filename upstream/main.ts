// Entry point for the demo upstream: reads UPSTREAM_PORT/HOST (or .env), listens, drains on SIGTERM/SIGINT.
import { existsSync } from "node:fs";
import { createServer } from "node:http";
import { createUpstreamApp } from "./app.js";

const DEFAULT_PORT = 8000;
// Loopback unless HOST says otherwise (the Dockerfile sets HOST=0.0.0.0 for containers).
const DEFAULT_HOST = "127.0.0.1";
/** Long enough for any in-flight demo request; after it, lingering keep-alive sockets are cut. */
const DRAIN_TIMEOUT_MS = 10_000;

function log(level: "info" | "error", msg: string, fields: Record<string, unknown> = {}): void {
  const line = JSON.stringify({ level, time: new Date().toISOString(), service: "upstream", msg, ...fields });
  if (level === "error") process.stderr.write(`${line}\n`);
  else process.stdout.write(`${line}\n`);
}

function readPort(raw: string | undefined): number {
  if (raw === undefined || raw === "") return DEFAULT_PORT;
  const port = /^\d{1,5}$/.test(raw) ? Number(raw) : Number.NaN;
  if (!(port >= 1 && port <= 65535)) {
    process.stderr.write(`UPSTREAM_PORT must be an integer from 1 to 65535, got ${JSON.stringify(raw)}\n`);
    process.exit(1);
  }
  return port;
}

/** Loads ENV_FILE (default `.env`) when it exists, as tollgate does; variables already set win. */
function loadEnvFile(): void {
  const given = process.env.ENV_FILE;
  const file = given ?? ".env";
  if (file === "") return;
  if (!existsSync(file)) {
    if (given === undefined) return;
    process.stderr.write(`upstream: ENV_FILE: "${file}" does not exist\n`);
    process.exit(1);
  }
  try {
    process.loadEnvFile(file);
  } catch (error) {
    process.stderr.write(
      `upstream: ${file}: cannot read it (${(error as NodeJS.ErrnoException).code ?? "error"})\n`,
    );
    process.exit(1);
  }
}

const HELP = `usage: npm run upstream  (or node dist/upstream/main.js)
The demo application behind the proxy. Settings from the environment, or from .env (ENV_FILE)
for those the environment does not set:
  UPSTREAM_PORT  port to listen on (default ${DEFAULT_PORT})
  HOST           bind address (default ${DEFAULT_HOST})
`;

const args = process.argv.slice(2);
if (args.includes("--help") || args.includes("-h")) {
  process.stdout.write(HELP);
  process.exit(0);
}
if (args.length > 0) {
  process.stderr.write(`upstream: unknown argument ${JSON.stringify(args[0])}; it takes none (--help)\n`);
  process.exit(2);
}

loadEnvFile();
const port = readPort(process.env.UPSTREAM_PORT);
const host = process.env.HOST || DEFAULT_HOST;

// node:http directly rather than app.listen(), whose express 5 callback also fires on listen errors.
const server = createServer(createUpstreamApp());
let shuttingDown = false;
server.on("error", (err: NodeJS.ErrnoException) => {
  log("error", "upstream failed to listen", { host, port, code: err.code, error: err.message });
  process.exit(1);
});
// A request still in flight at shutdown leaves a keep-alive socket behind once answered; cut it then.
server.on("request", (_req, res) => {
  res.on("finish", () => {
    if (shuttingDown) server.closeIdleConnections();
  });
});
server.listen(port, host, () => {
  log("info", "upstream listening", { host, port });
});

function shutdown(signal: NodeJS.Signals): void {
  if (shuttingDown) return;
  shuttingDown = true;
  log("info", "upstream shutting down", { signal });
  // close() stops accepting and waits for in-flight requests; idle keep-alive sockets would hold it open.
  server.close(() => {
    log("info", "upstream stopped");
    process.exit(0);
  });
  server.closeIdleConnections();
  setTimeout(() => server.closeAllConnections(), DRAIN_TIMEOUT_MS).unref();
}

process.on("SIGTERM", shutdown);
process.on("SIGINT", shutdown);
