// WORKERS=2: one `node dist/src/main.js` whose workers share the three ports, on a real Redis.

import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, writeFileSync } from "node:fs";
import { createServer, request } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DEFAULT_POLICY_YAML } from "../../src/policy/policy.js";
import { RESTART_FIRST_MS, RESTART_MAX_MS, restartDelayMs } from "../../src/process/workers.js";
import { childrenOf } from "../support/children.js";
import { login } from "../support/http-client.mjs";
import { waitFor } from "../support/ports.js";
import {
  freeTollgatePorts,
  startTollgate,
  type TollgateProcess,
  tollgateEnv,
} from "../support/processes.mjs";
import { redisUrl, testPrefix } from "../support/redis.js";

type Answer = { status: number; body: string };

/** One request on a connection of its own, so that the cluster hands each to the next worker. */
function fresh(
  url: string,
  options: { method?: string; headers?: Record<string, string>; body?: string } = {},
) {
  return new Promise<Answer>((resolve, reject) => {
    const req = request(
      url,
      { method: options.method ?? "GET", headers: options.headers, agent: false },
      (res) => {
        let body = "";
        res.setEncoding("utf8");
        res.on("data", (chunk: string) => {
          body += chunk;
        });
        res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
      },
    );
    req.on("error", reject);
    req.end(options.body);
  });
}

const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

/** JSON log lines of the process, parsed; other output is skipped. */
const logLines = (proc: TollgateProcess): Array<Record<string, unknown>> =>
  proc
    .output()
    .split("\n")
    .flatMap((line) => {
      try {
        return [JSON.parse(line) as Record<string, unknown>];
      } catch {
        return [];
      }
    });

/** The pids that logged "ready": workers that have opened all three ports and loaded the users. */
const listeningPids = (proc: TollgateProcess): Set<number> =>
  new Set(logLines(proc).flatMap((l) => (l.event === "ready" ? [Number(l.pid)] : [])));

const policyDir = mkdtempSync(join(tmpdir(), "tollgate-workers-policy-"));
const policyFile = join(policyDir, "policy.yaml");
writeFileSync(policyFile, DEFAULT_POLICY_YAML);

describe("WORKERS=2 with real Redis", () => {
  let tollgate: TollgateProcess;
  let primary: number;

  beforeAll(async () => {
    tollgate = await startTollgate(
      {
        REDIS_URL: redisUrl(),
        REDIS_KEY_PREFIX: testPrefix(),
        WORKERS: "2",
        // The bursts below must not degrade on a loaded machine: exactness is the point, not speed.
        REDIS_TIMEOUT_MS: "2000",
        POLICY_FILE: policyFile,
      },
      { readyMs: 45_000 },
    );
    primary = tollgate.child.pid as number;
    await waitFor(async () => listeningPids(tollgate).size === 2, 30_000, "two workers listening");
  }, 90_000);

  afterAll(async () => {
    if (tollgate !== undefined && tollgate.child.exitCode === null) await tollgate.stop("SIGKILL");
  });

  it("runs two workers that share the ports and take turns with new connections", async () => {
    const workers = childrenOf(primary);
    expect(workers).toHaveLength(2);
    expect([...listeningPids(tollgate)].sort((a, b) => a - b)).toEqual(workers);
    // The supervisor says once where the workers listen, as the first worker reported it.
    const started = logLines(tollgate).filter((l) => l.event === "workers_started");
    expect(started).toHaveLength(1);
    expect(started[0]).toMatchObject({
      workers: 2,
      ports: [tollgate.port, tollgate.checkPort, tollgate.grpcPort, tollgate.adminPort],
      hosts: { public: "127.0.0.1", check: "127.0.0.1", grpc: "127.0.0.1", admin: "127.0.0.1" },
    });
    // Ten logins, each on a new connection from its own client address: every worker answers some.
    const before = logLines(tollgate).length;
    for (let i = 0; i < 10; i += 1) {
      const res = await fresh(`${tollgate.url}/auth/login`, {
        method: "POST",
        headers: { "content-type": "application/json", "x-forwarded-for": `198.51.100.${i + 1}` },
        body: JSON.stringify({ username: "bob_pro", password: "secret" }),
      });
      expect(res.status, res.body).toBe(200);
    }
    await waitFor(
      async () =>
        logLines(tollgate)
          .slice(before)
          .filter((l) => l.event === "login").length === 10,
      5_000,
      "ten login log lines",
    );
    const served = logLines(tollgate)
      .slice(before)
      .filter((l) => l.event === "login")
      .map((l) => Number(l.pid));
    expect(new Set(served)).toEqual(new Set(workers));
  });

  it("lets exactly the limit through when checks are spread over both workers, and counts them all", async () => {
    const username = `workers_${randomBytes(6).toString("hex")}`;
    const created = await fresh(`${tollgate.adminUrl}/admin/users`, {
      method: "POST",
      headers: { authorization: `Bearer ${tollgate.adminToken}`, "content-type": "application/json" },
      body: JSON.stringify({ username, password: "correct horse battery", tier: "free" }),
    });
    expect(created.status, created.body).toBe(201);
    const { access_token: token } = await login(tollgate.url, username, "correct horse battery");
    const allowedBefore = await allowedFreeGeneral(tollgate);

    const answers = await Promise.all(
      Array.from({ length: 300 }, () =>
        fresh(`${tollgate.checkUrl}/ext_authz/api/products`, {
          headers: { authorization: `Bearer ${token}` },
        }),
      ),
    );
    const counts: Record<number, number> = {};
    for (const a of answers) counts[a.status] = (counts[a.status] ?? 0) + 1;
    expect(counts).toEqual({ 200: 100, 429: 200 });
    // GET /metrics lands on one worker but reports the checks of both, and says it sums two.
    expect((await allowedFreeGeneral(tollgate)) - allowedBefore).toBe(100);
    const metrics = await fresh(`${tollgate.adminUrl}/metrics`);
    expect(metrics.body).toMatch(/^tollgate_workers 2$/m);
  });

  it("reloads the policy on every worker, through one worker's admin port or by SIGHUP to the primary", async () => {
    /** The versions that 20 new connections were answered with: the workers take turns with them. */
    const only = async (): Promise<Set<string>> => {
      const seen = new Set<string>();
      for (let i = 0; i < 20; i += 1) {
        const res = await fresh(`${tollgate.adminUrl}/admin/policy`, {
          headers: { authorization: `Bearer ${tollgate.adminToken}` },
        });
        expect(res.status).toBe(200);
        seen.add((JSON.parse(res.body) as { version: string }).version);
      }
      return seen;
    };
    const start = await only();
    expect(start.size).toBe(1);
    writeFileSync(policyFile, DEFAULT_POLICY_YAML.replace("search: 200/1h", "search: 250/1h"));
    const reload = await fresh(`${tollgate.adminUrl}/admin/policy/reload`, {
      method: "POST",
      headers: { authorization: `Bearer ${tollgate.adminToken}` },
    });
    expect(reload.status, reload.body).toBe(200);
    const changed = (JSON.parse(reload.body) as { version: string }).version;
    await waitFor(
      async () => logLines(tollgate).filter((l) => l.event === "policy_reloaded").length >= 2,
      5_000,
      "both workers reloaded",
    );
    expect(await only()).toEqual(new Set([changed]));
    writeFileSync(policyFile, DEFAULT_POLICY_YAML);
    const before = logLines(tollgate).filter((l) => l.event === "policy_reloaded").length;
    process.kill(primary, "SIGHUP");
    await waitFor(
      async () => logLines(tollgate).filter((l) => l.event === "policy_reloaded").length >= before + 2,
      5_000,
      "both workers reloaded after SIGHUP",
    );
    expect(await only()).toEqual(start);
    expect(
      new Set(
        logLines(tollgate)
          .filter((l) => l.event === "policy_reloaded")
          .map((l) => Number(l.pid)),
      ),
    ).toEqual(new Set(childrenOf(primary)));
  });

  it("replaces a worker that dies, and keeps answering", async () => {
    const [victim, other] = childrenOf(primary) as [number, number];
    process.kill(victim, "SIGKILL");
    await waitFor(
      async () => {
        const now = childrenOf(primary);
        return now.length === 2 && !now.includes(victim) && now.includes(other);
      },
      15_000,
      "a new worker in place of the killed one",
    );
    const replacement = childrenOf(primary).find((pid) => pid !== other) as number;
    await waitFor(async () => listeningPids(tollgate).has(replacement), 20_000, "the new worker listening");
    expect(logLines(tollgate).some((l) => l.event === "worker_died")).toBe(true);
    const answers = await Promise.all(Array.from({ length: 20 }, () => fresh(`${tollgate.url}/health`)));
    expect(answers.map((a) => a.status)).toEqual(Array(20).fill(200));
  });

  it("drains every worker on SIGTERM, and the primary exits 0", async () => {
    const workers = childrenOf(primary);
    expect(workers).toHaveLength(2);
    expect(await tollgate.stop("SIGTERM")).toBe(0);
    for (const pid of workers) expect(alive(pid), `worker ${pid}`).toBe(false);
    const stopped = logLines(tollgate)
      .filter((l) => l.event === "stopped")
      .map((l) => Number(l.pid));
    // Each worker drained (its own "stopped" line), then the primary.
    expect(new Set(stopped)).toEqual(new Set([...workers, primary]));
  });
});

/** Allowed checks of free users on the general category, as GET /metrics reports them. */
async function allowedFreeGeneral(tollgate: TollgateProcess): Promise<number> {
  const metrics = await fresh(`${tollgate.adminUrl}/metrics`);
  expect(metrics.status).toBe(200);
  return metrics.body
    .split("\n")
    .filter(
      (line) =>
        line.startsWith("tollgate_decisions_total{") &&
        ['decision="allow"', 'tier="free"', 'category="general"'].every((label) => line.includes(label)),
    )
    .reduce((sum, line) => sum + Number(line.slice(line.lastIndexOf(" ") + 1)), 0);
}

describe("the worker supervisor", () => {
  it("waits longer after each death in a row, up to a ceiling, so a crash loop cannot spin", () => {
    const delays = Array.from({ length: 10 }, (_, n) => restartDelayMs(n));
    expect(delays.slice(0, 4)).toEqual([
      RESTART_FIRST_MS,
      RESTART_FIRST_MS * 2,
      RESTART_FIRST_MS * 4,
      RESTART_FIRST_MS * 8,
    ]);
    for (let n = 1; n < delays.length; n += 1)
      expect(delays[n]).toBeGreaterThanOrEqual(delays[n - 1] as number);
    expect(delays.at(-1)).toBe(RESTART_MAX_MS);
    expect(restartDelayMs(1000)).toBe(RESTART_MAX_MS);
  });

  it("prints a generated admin token once, framed apart from the log lines, and every worker accepts it", async () => {
    const tollgate = await startTollgate(
      { REDIS_URL: redisUrl(), REDIS_KEY_PREFIX: testPrefix(), WORKERS: "2", ADMIN_TOKEN: "" },
      { readyMs: 45_000 },
    );
    try {
      await waitFor(async () => listeningPids(tollgate).size === 2, 30_000, "two workers listening");
      const token = /│ export ADMIN_TOKEN=(\S+) +│/.exec(tollgate.output())?.[1] ?? "";
      expect(token.length, tollgate.output()).toBeGreaterThanOrEqual(32);
      expect(tollgate.output().split(token)).toHaveLength(2); // exactly once, and in no JSON line
      // New connections go to the workers in turn: each of them knows the primary's token.
      for (let i = 0; i < 6; i += 1) {
        const res = await fresh(`${tollgate.adminUrl}/admin/users/demo-alice/sessions`, {
          headers: { authorization: `Bearer ${token}` },
        });
        expect(res.status, res.body).toBe(200);
      }
    } finally {
      await tollgate.stop("SIGKILL");
    }
  }, 90_000);

  it("keeps every worker's drain when SIGTERM reaches the whole process group and the primary forwards it too", async () => {
    const drainMs = 1_500;
    const child = spawn(process.execPath, ["dist/src/main.js"], {
      cwd: fileURLToPath(new URL("../../", import.meta.url)),
      env: {
        ...tollgateEnv(await freeTollgatePorts()),
        REDIS_URL: redisUrl(),
        REDIS_KEY_PREFIX: testPrefix(),
        WORKERS: "2",
        DRAIN_DELAY_MS: String(drainMs),
      },
      // A process group of its own, as a terminal job or a systemd unit has: the signal reaches all of it.
      detached: true,
      stdio: ["ignore", "pipe", "ignore"],
    });
    let out = "";
    child.stdout.on("data", (d: Buffer) => {
      out += d.toString();
    });
    const lines = () =>
      out.split("\n").flatMap((line) => {
        try {
          return [JSON.parse(line) as { event?: string; pid: number; time: string }];
        } catch {
          return [];
        }
      });
    const exited = new Promise<number | null>((resolve) => child.once("exit", (c) => resolve(c)));
    try {
      await waitFor(
        async () => lines().filter((l) => l.event === "ready").length === 2,
        45_000,
        "two workers",
      );
      process.kill(-(child.pid as number), "SIGTERM");
      expect(await exited).toBe(0);
      const workers = lines()
        .filter((l) => l.event === "ready")
        .map((l) => l.pid);
      for (const pid of workers) {
        const at = (event: string) =>
          Date.parse(lines().find((l) => l.pid === pid && l.event === event)?.time ?? "");
        // The second SIGTERM (the primary's) arrived during the drain and did not cut it short.
        expect(at("stopped") - at("stopping"), `worker ${pid}`).toBeGreaterThanOrEqual(drainMs - 50);
      }
    } finally {
      if (child.exitCode === null) process.kill(-(child.pid as number), "SIGKILL");
    }
  }, 90_000);

  it("exits 1 instead of restarting workers that cannot start at all (a port already in use)", async () => {
    const taken = createServer();
    await new Promise<void>((resolve) => taken.listen(0, "127.0.0.1", resolve));
    const port = (taken.address() as AddressInfo).port;
    const child = spawn(process.execPath, ["dist/src/main.js"], {
      cwd: fileURLToPath(new URL("../../", import.meta.url)),
      env: {
        // Public port: the one already in use.
        ...tollgateEnv({ ...(await freeTollgatePorts()), port }),
        REDIS_URL: redisUrl(),
        REDIS_KEY_PREFIX: testPrefix(),
        WORKERS: "2",
      },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let output = "";
    child.stdout.on("data", (d: Buffer) => {
      output += d.toString();
    });
    child.stderr.on("data", (d: Buffer) => {
      output += d.toString();
    });
    const code = await new Promise<number | null>((resolve) => {
      // Only a guard against a supervisor that never exits: start-up alone can take long on a busy machine.
      const timer = setTimeout(() => child.kill("SIGKILL"), 60_000);
      child.once("exit", (c) => {
        clearTimeout(timer);
        resolve(c);
      });
    });
    taken.close();
    expect(code, output).toBe(1);
    expect(output).toContain("worker_start_failed");
  }, 90_000);
});
