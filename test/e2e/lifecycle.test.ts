// Start and stop of the real process: readiness that means ready, the drain, a closed output pipe, .env.
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { freePort, waitFor } from "../support/ports.js";
import { freeTollgatePorts, tollgateEnv } from "../support/processes.mjs";

const MAIN = fileURLToPath(new URL("../../dist/src/main.js", import.meta.url));
const ROOT = fileURLToPath(new URL("../../", import.meta.url));

type Started = {
  child: ChildProcess;
  port: number;
  checkPort: number;
  adminPort: number;
  grpcPort: number;
  stdout(): string;
  stderr(): string;
  exited: Promise<{ code: number | null; at: number }>;
};

/** Spawns tollgate on free ports with the memory store; nothing waits for it to be ready. */
async function spawnTollgate(env: Record<string, string> = {}, cwd = ROOT): Promise<Started> {
  const ports = await freeTollgatePorts();
  const { port, checkPort, adminPort, grpcPort } = ports;
  const child = spawn(process.execPath, [MAIN], {
    cwd,
    env: { ...tollgateEnv(ports), ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  let err = "";
  child.stdout?.on("data", (d: Buffer) => {
    out += d.toString();
  });
  child.stderr?.on("data", (d: Buffer) => {
    err += d.toString();
  });
  const exited = new Promise<{ code: number | null; at: number }>((resolve) =>
    child.once("exit", (code) => resolve({ code, at: Date.now() })),
  );
  return { child, port, checkPort, adminPort, grpcPort, stdout: () => out, stderr: () => err, exited };
}

async function status(
  url: string,
  init?: RequestInit,
): Promise<{ status: number; headers: Headers; body: string }> {
  const res = await fetch(url, init);
  return { status: res.status, headers: res.headers, body: await res.text() };
}

const loginInit = (password = "secret"): RequestInit => ({
  method: "POST",
  headers: { "content-type": "application/json" },
  body: JSON.stringify({ username: "alice", password }),
});

const ready = async (p: Started): Promise<boolean> =>
  (await status(`http://127.0.0.1:${p.port}/ready`)).status === 200;

/** Resolves with the exit, or rejects when the process is still running after `ms`. */
function exitWithin(p: Started, ms: number): Promise<{ code: number | null; at: number }> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`still running ${ms} ms later:\n${p.stdout()}${p.stderr()}`)),
      ms,
    );
  });
  return Promise.race([p.exited, late]).finally(() => {
    clearTimeout(timer);
    if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill("SIGKILL");
  });
}

/**
 * Polls /ready and logs in at the same pace from the moment the process is spawned; returns every
 * login status seen before /ready's first 200, and the login at that first 200.
 */
/**
 * Users whose plain passwords are hashed while tollgate loads them (scrypt, tens of ms each): a
 * start-up with a window between listening and ready that the polling below is sure to hit. (The
 * demo users carry a precomputed hash and load in about a millisecond.)
 */
const SLOW_USERS = (() => {
  const dir = mkdtempSync(join(tmpdir(), "tollgate-users-"));
  const file = join(dir, "users.json");
  const others = Array.from({ length: 11 }, (_, i) => ({
    username: `user${i}`,
    tier: "pro",
    password: `pw-${i}`,
  }));
  writeFileSync(
    file,
    JSON.stringify({ users: [{ username: "alice", tier: "free", password: "secret" }, ...others] }),
  );
  return file;
})();

async function raceStart(): Promise<{
  early: { status: number; retryAfter: string | null }[];
  first: number;
}> {
  const p = await spawnTollgate({ USERS_FILE: SLOW_USERS });
  const early: { status: number; retryAfter: string | null }[] = [];
  try {
    for (;;) {
      const login = await status(`http://127.0.0.1:${p.port}/auth/login`, loginInit()).catch(() => undefined);
      const isReady = await ready(p).catch(() => false);
      if (isReady) {
        const first = await status(`http://127.0.0.1:${p.port}/auth/login`, loginInit());
        return { early, first: first.status };
      }
      if (login !== undefined)
        early.push({ status: login.status, retryAfter: login.headers.get("retry-after") });
      if (p.child.exitCode !== null) throw new Error(`exited early:\n${p.stdout()}${p.stderr()}`);
      await new Promise((r) => setTimeout(r, 15));
    }
  } finally {
    p.child.kill("SIGKILL");
    await p.exited;
  }
}

describe("readiness", () => {
  it("answers /ready 200 only once a login works: 20 starts, a login at the first 200 never gets 401", async () => {
    const runs = [];
    for (let round = 0; round < 5; round += 1) {
      runs.push(...(await Promise.all([raceStart(), raceStart(), raceStart(), raceStart()])));
    }
    expect(runs).toHaveLength(20);
    for (const run of runs) expect(run.first).toBe(200);
    const early = runs.flatMap((run) => run.early);
    // Logins that reached the process before it was ready: 503 with Retry-After, never a 401.
    for (const login of early) {
      if (login.status !== 200) expect(login).toEqual({ status: 503, retryAfter: "1" });
    }
    expect(early.some((login) => login.status === 503)).toBe(true);
  }, 180_000);

  it("logs one line when ready, with the URLs of the four listeners, and none before", async () => {
    const p = await spawnTollgate();
    try {
      await waitFor(() => ready(p), 15_000, "ready");
      await waitFor(async () => p.stdout().includes('"event":"ready"'), 5_000, "the ready line");
      const lines = p.stdout().trim().split("\n");
      const readyLines = lines.filter((line) => JSON.parse(line).event === "ready");
      expect(readyLines).toHaveLength(1);
      const line = JSON.parse(readyLines[0] as string);
      expect(line.urls).toEqual({
        public: `http://127.0.0.1:${p.port}`,
        check: `http://127.0.0.1:${p.checkPort}`,
        grpc: `http://127.0.0.1:${p.grpcPort}`,
        admin: `http://127.0.0.1:${p.adminPort}`,
      });
      for (const url of Object.values(line.urls)) expect(line.msg).toContain(url);
      // Users are loaded before it says it is ready, and nothing claims to listen earlier.
      const at = (event: string) => lines.findIndex((l) => JSON.parse(l).event === event);
      expect(at("users_loaded")).toBeGreaterThanOrEqual(0);
      expect(at("users_loaded")).toBeLessThan(at("ready"));
      expect(p.stdout()).not.toMatch(/listening/);
    } finally {
      p.child.kill("SIGKILL");
      await p.exited;
    }
  });
});

describe("stopping", () => {
  it("exits 0 on SIGTERM when its reader goes away mid-stop, like `| head` (the last lines meet a closed pipe)", async () => {
    const p = await spawnTollgate();
    await waitFor(() => ready(p), 15_000, "ready");
    p.child.stdout?.on("data", (d: Buffer) => {
      if (d.toString().includes('"event":"stopping"')) {
        p.child.stdout?.destroy();
        p.child.stderr?.destroy();
      }
    });
    p.child.kill("SIGTERM");
    const exit = await exitWithin(p, 8_000);
    expect(exit.code).toBe(0);
  });

  it("exits 0 on SIGTERM even after the reader of its stdout and stderr has gone", async () => {
    const p = await spawnTollgate({ LOG_LEVEL: "debug" });
    await waitFor(() => ready(p), 15_000, "ready");
    // Both pipes closed at our end: every later write of the process fails with EPIPE.
    p.child.stdout?.destroy();
    p.child.stderr?.destroy();
    await status(`http://127.0.0.1:${p.port}/auth/login`, loginInit("wrong")); // logs a login_failed line
    p.child.kill("SIGTERM");
    const exit = await exitWithin(p, 8_000);
    expect(exit.code).toBe(0);
  });

  it("answers /ready 503 first on SIGTERM, keeps serving for DRAIN_DELAY_MS, then closes and exits 0", async () => {
    const drainMs = 1_500;
    const p = await spawnTollgate({ DRAIN_DELAY_MS: String(drainMs) });
    await waitFor(() => ready(p), 15_000, "ready");
    const base = `http://127.0.0.1:${p.port}`;
    const sent = Date.now();
    p.child.kill("SIGTERM");
    await waitFor(async () => (await status(`${base}/ready`)).status === 503, 1_000, "/ready 503");
    const during = {
      ready: await status(`${base}/ready`),
      adminReady: await status(`http://127.0.0.1:${p.adminPort}/ready`),
      health: await status(`${base}/health`),
      login: await status(`${base}/auth/login`, loginInit()),
      check: await status(`http://127.0.0.1:${p.checkPort}/ext_authz/api/products`),
    };
    const elapsed = Date.now() - sent;
    expect(elapsed).toBeLessThan(drainMs); // all of the above ran inside the drain delay
    expect(during.ready.status).toBe(503);
    expect(JSON.parse(during.ready.body)).toMatchObject({ error: "unavailable" });
    expect(during.adminReady.status).toBe(503);
    expect(during.health.status).toBe(200);
    expect(during.login.status).toBe(200);
    expect(during.check.status).toBe(401); // answered: the check listener still accepts
    const exit = await exitWithin(p, drainMs + 8_000);
    expect(exit.code).toBe(0);
    expect(exit.at - sent).toBeGreaterThanOrEqual(drainMs);
    await expect(fetch(`${base}/health`)).rejects.toThrow();
    const stopping = p
      .stdout()
      .split("\n")
      .find((line) => line.includes('"event":"stopping"'));
    expect(JSON.parse(stopping ?? "{}")).toMatchObject({ signal: "SIGTERM", drainDelayMs: drainMs });
  });

  it("skips the drain delay on SIGINT, the signal of a person at a terminal", async () => {
    const p = await spawnTollgate({ DRAIN_DELAY_MS: "600000" });
    await waitFor(() => ready(p), 15_000, "ready");
    p.child.kill("SIGINT");
    const exit = await exitWithin(p, 8_000);
    expect(exit.code).toBe(0);
  });

  it("cuts the drain delay short on a second signal", async () => {
    const p = await spawnTollgate({ DRAIN_DELAY_MS: "600000" });
    await waitFor(() => ready(p), 15_000, "ready");
    p.child.kill("SIGTERM");
    await waitFor(
      async () => (await status(`http://127.0.0.1:${p.port}/ready`)).status === 503,
      2_000,
      "503",
    );
    // Later than a repeat of the first signal could arrive (see the next test).
    await new Promise((r) => setTimeout(r, 1_100));
    p.child.kill("SIGTERM");
    const exit = await exitWithin(p, 8_000);
    expect(exit.code).toBe(0);
  });

  it("takes a signal repeated at once (its process group, then a parent forwarding it) as one stop: the drain still runs", async () => {
    const drainMs = 1_500;
    const p = await spawnTollgate({ DRAIN_DELAY_MS: String(drainMs) });
    await waitFor(() => ready(p), 15_000, "ready");
    const sent = Date.now();
    p.child.kill("SIGTERM");
    // The first signal was handled; the repeat comes right after it, as npm's or the supervisor's would.
    await waitFor(async () => p.stdout().includes('"event":"stopping"'), 2_000, "the stopping line");
    p.child.kill("SIGTERM");
    await new Promise((r) => setTimeout(r, 200));
    expect((await status(`http://127.0.0.1:${p.port}/health`)).status).toBe(200); // still draining
    const exit = await exitWithin(p, drainMs + 8_000);
    expect(exit.code).toBe(0);
    expect(exit.at - sent).toBeGreaterThanOrEqual(drainMs);
  });

  it("stops when `npm start` itself is sent SIGTERM, leaving no tollgate behind", async () => {
    const ports = await freeTollgatePorts();
    const { port } = ports;
    const npm = spawn("npm", ["start"], {
      cwd: ROOT,
      env: { ...tollgateEnv(ports), HOME: process.env.HOME ?? tmpdir() },
      stdio: ["ignore", "pipe", "ignore"],
    });
    let out = "";
    npm.stdout?.on("data", (d: Buffer) => {
      out += d.toString();
    });
    const base = `http://127.0.0.1:${port}`;
    let tollgatePid: number | undefined;
    try {
      await waitFor(async () => (await status(`${base}/ready`)).status === 200, 30_000, "ready");
      await waitFor(async () => out.includes('"event":"ready"'), 5_000, "the ready line");
      tollgatePid = JSON.parse(out.split("\n").find((l) => l.includes('"event":"ready"')) ?? "{}").pid;
      npm.kill("SIGTERM"); // what `kill $!` after `npm start &` sends: to npm alone, not its group
      await waitFor(
        async () =>
          !(await fetch(`${base}/health`).then(
            () => true,
            () => false,
          )),
        8_000,
        "tollgate to stop",
      );
    } finally {
      npm.kill("SIGKILL");
      if (tollgatePid !== undefined) {
        try {
          process.kill(tollgatePid, "SIGKILL");
        } catch {
          // gone, as it should be
        }
      }
    }
  });
});

describe("first start", () => {
  it("reads .env from its working directory, with the real environment winning", async () => {
    const dir = mkdtempSync(join(tmpdir(), "tollgate-env-"));
    const fileToken = "admin-token-from-the-env-file-0123456789";
    writeFileSync(join(dir, ".env"), `ADMIN_TOKEN=${fileToken}\nPORT=1\nLOG_FORMAT=json\n`);
    // No ENV_FILE and no ADMIN_TOKEN here: the token can only come from the file.
    const [port, checkPort, adminPort, grpcPort] = [
      await freePort(),
      await freePort(),
      await freePort(),
      await freePort(),
    ];
    const child = spawn(process.execPath, [MAIN], {
      cwd: dir,
      env: {
        PATH: process.env.PATH ?? "",
        HOST: "127.0.0.1",
        PORT: String(port),
        CHECK_PORT: String(checkPort),
        ADMIN_PORT: String(adminPort),
        GRPC_PORT: String(grpcPort),
      },
      stdio: "ignore",
    });
    try {
      await waitFor(
        async () => (await status(`http://127.0.0.1:${port}/ready`)).status === 200,
        15_000,
        "ready on the port from the environment, not the file's",
      );
      const admin = await status(`http://127.0.0.1:${adminPort}/admin/users/demo-alice/sessions`, {
        headers: { authorization: `Bearer ${fileToken}` },
      });
      expect(admin.status).toBe(200);
    } finally {
      child.kill("SIGKILL");
    }
  });

  it("stops naming ENV_FILE when it names something it cannot read as a file of settings", async () => {
    const dir = mkdtempSync(join(tmpdir(), "tollgate-env-"));
    const child = spawn(process.execPath, [MAIN], {
      env: { PATH: process.env.PATH ?? "", ENV_FILE: dir },
      stdio: ["ignore", "ignore", "pipe"],
    });
    let stderr = "";
    child.stderr.on("data", (d: Buffer) => {
      stderr += d.toString();
    });
    const code = await new Promise<number | null>((resolve) => child.once("exit", resolve));
    expect(code, stderr).toBe(1);
    expect(stderr).toMatch(new RegExp(`^tollgate: ENV_FILE: cannot read "${dir}" \\(\\w+\\)\\n$`));
  });

  it("prints a generated admin token once, framed on stderr, and never in the JSON log lines", async () => {
    const p = await spawnTollgate({ ADMIN_TOKEN: "" });
    try {
      await waitFor(() => ready(p), 15_000, "ready");
      await waitFor(async () => p.stderr().includes("└"), 5_000, "the framed token");
      const token = /export ADMIN_TOKEN=(\S+)/.exec(p.stderr())?.[1] ?? "";
      expect(token.length).toBeGreaterThanOrEqual(32);
      expect(p.stderr().split(token)).toHaveLength(2); // exactly once
      expect(p.stdout()).not.toContain(token);
      for (const line of p.stdout().trim().split("\n")) expect(() => JSON.parse(line)).not.toThrow();
      const admin = await status(`http://127.0.0.1:${p.adminPort}/admin/users/demo-alice/sessions`, {
        headers: { authorization: `Bearer ${token}` },
      });
      expect(admin.status).toBe(200);
    } finally {
      p.child.kill("SIGKILL");
      await p.exited;
    }
  });
});
