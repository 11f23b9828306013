// WORKERS=2 on a real Redis: POST /admin/policy/reload answers once every worker runs the reload,
// all of them from one reading of the files, and says which worker did not confirm; a worker that
// replaces a dead one starts on what the others run, whatever the files hold by then.

import { randomBytes } from "node:crypto";
import { mkdtempSync, writeFileSync } from "node:fs";
import { Agent, request } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { DEFAULT_POLICY_YAML, parsePolicy } from "../../src/policy/policy.js";
import { policyVersion } from "../../src/policy/policy-state.js";
import { RELOAD_WAIT_MS } from "../../src/process/worker-reloads.js";
import { rlsConfigFrom } from "../../src/rls/load.js";
import { childrenOf } from "../support/children.js";
import { login } from "../support/http-client.mjs";
import { waitFor } from "../support/ports.js";
import { startTollgate, type TollgateProcess } from "../support/processes.mjs";
import { redisUrl, testPrefix } from "../support/redis.js";

type Answer = { status: number; headers: Record<string, string | string[] | undefined>; body: string };

/** One request; `agent: false` opens a connection of its own, which the cluster hands to the next free worker. */
function call(
  url: string,
  options: { method?: string; headers?: Record<string, string>; agent?: Agent | false } = {},
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = request(
      url,
      { method: options.method ?? "GET", headers: options.headers, agent: options.agent ?? false },
      (res) => {
        let body = "";
        res.setEncoding("utf8");
        res.on("data", (chunk: string) => {
          body += chunk;
        });
        res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
      },
    );
    req.on("error", reject);
    req.end();
  });
}

const SOCKETS = 8;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const folder = mkdtempSync(join(tmpdir(), "tollgate-workers-reload-"));
const policyFile = join(folder, "policy.yaml");
const rlsFile = join(folder, "rls.yaml");
const rlsYaml = (perHour: number) =>
  `domain: workers\ndescriptors:\n  - key: path\n    rate_limit: { unit: hour, requests_per_unit: ${perHour} }\n`;
/** The free tier's general limit: what a check's X-RateLimit-Limit shows, and so which policy decided it. */
const policyYaml = (freeGeneral: number) =>
  DEFAULT_POLICY_YAML.replace(/(free: +\{ general: )100\/1h/, `$1${freeGeneral}/1h`);
/** The versions GET /admin/policy and GET /admin/rls report once those files are in force. */
const versionsOf = (freeGeneral: number, perHour: number) => ({
  policy: policyVersion(parsePolicy(policyYaml(freeGeneral), "test")),
  rls: rlsConfigFrom(
    "rls.yaml",
    { files: [{ name: "rls.yaml", text: rlsYaml(perHour) }], problems: [] },
    { defaultAlgorithm: "fixed-window" },
  ).version,
});
/** A worker's part of a reload that took: changed, or unchanged where a watch of the file was quicker. */
const TOOK = /^(changed|unchanged)$/;

describe("reloads under WORKERS=2 with real Redis", () => {
  let tollgate: TollgateProcess;
  let primary: number;
  let token: string;
  // Kept-alive connections, opened before each reload and spread over both workers, as a proxy's pool is.
  let checkAgent: Agent;
  let adminAgent: Agent;
  const admin = { authorization: "" };
  let stopped: number | undefined;

  beforeAll(async () => {
    writeFileSync(policyFile, policyYaml(100));
    writeFileSync(rlsFile, rlsYaml(10));
    tollgate = await startTollgate(
      {
        REDIS_URL: redisUrl(),
        REDIS_KEY_PREFIX: testPrefix(),
        REDIS_TIMEOUT_MS: "2000",
        POLICY_FILE: policyFile,
        RLS_CONFIG: rlsFile,
      },
      { readyMs: 45_000, workers: 2 },
    );
    primary = tollgate.child.pid as number;
    admin.authorization = `Bearer ${tollgate.adminToken}`;
    const username = `reload_${randomBytes(6).toString("hex")}`;
    const res = await fetch(`${tollgate.adminUrl}/admin/users`, {
      method: "POST",
      headers: { ...admin, "content-type": "application/json" },
      body: JSON.stringify({ username, password: "correct horse battery", tier: "free" }),
    });
    expect(res.status).toBe(201);
    token = (await login(tollgate.url, username, "correct horse battery")).access_token;
  }, 90_000);

  afterEach(() => {
    if (stopped !== undefined) process.kill(stopped, "SIGCONT");
    stopped = undefined;
    checkAgent?.destroy();
    adminAgent?.destroy();
  });

  afterAll(async () => {
    if (tollgate !== undefined && tollgate.child.exitCode === null) await tollgate.stop("SIGKILL");
  });

  /** Opens SOCKETS kept-alive connections to each port at once: the cluster hands them to both workers in turn. */
  const openPools = async () => {
    checkAgent = new Agent({ keepAlive: true, maxSockets: SOCKETS });
    adminAgent = new Agent({ keepAlive: true, maxSockets: SOCKETS });
    await Promise.all(
      Array.from({ length: SOCKETS }, async () => {
        expect((await call(`${tollgate.checkUrl}/health`, { agent: checkAgent })).status).toBe(200);
        expect((await call(`${tollgate.adminUrl}/health`, { agent: adminAgent })).status).toBe(200);
      }),
    );
  };

  /**
   * Stops one worker (SIGSTOP), then makes sure that a new connection to the admin port goes to the
   * other one: node:cluster hands a connection to a worker only once it took the one before, so one
   * connection sent its way stays with it and every later one goes to the other worker.
   */
  const stopOneWorker = async (): Promise<{ victim: number; other: number }> => {
    const [victim, other] = childrenOf(primary) as [number, number];
    process.kill(victim, "SIGSTOP");
    stopped = victim;
    for (let i = 0; i < 2; i += 1) {
      void call(`${tollgate.adminUrl}/health`).catch(() => undefined);
      await sleep(300);
    }
    return { victim, other };
  };

  const reload = () =>
    call(`${tollgate.adminUrl}/admin/policy/reload`, { method: "POST", headers: admin, agent: false });

  /** Versions that GET /admin/policy and GET /admin/rls answer on the kept-alive connections, many at once. */
  const versionsSeen = async () => {
    const answers = await Promise.all(
      Array.from({ length: 3 * SOCKETS }, (_, i) =>
        call(`${tollgate.adminUrl}/admin/${i % 2 === 0 ? "policy" : "rls"}`, {
          headers: admin,
          agent: adminAgent,
        }),
      ),
    );
    const seen = { policy: new Set<string>(), rls: new Set<string>() };
    answers.forEach((a, i) => {
      expect(a.status, a.body).toBe(200);
      seen[i % 2 === 0 ? "policy" : "rls"].add((JSON.parse(a.body) as { version: string }).version);
    });
    return seen;
  };

  /** The free general limit that checks on the kept-alive connections are decided under, many at once. */
  const limitsSeen = async () => {
    const answers = await Promise.all(
      Array.from({ length: 5 * SOCKETS }, () =>
        call(`${tollgate.checkUrl}/ext_authz/api/products`, {
          headers: { authorization: `Bearer ${token}` },
          agent: checkAgent,
        }),
      ),
    );
    return new Set(answers.map((a) => `${a.status} ${a.headers["x-ratelimit-limit"]}`));
  };

  it("answers a reload once every worker runs it, a slow worker too, and files changed after the answer do not split them", async () => {
    await openPools();
    const expected = versionsOf(1000, 20);
    writeFileSync(policyFile, policyYaml(1000));
    writeFileSync(rlsFile, rlsYaml(20));
    const { victim, other } = await stopOneWorker();
    // The stopped worker wakes up after a while, well within the time a reload waits for it.
    const woken = new Promise<void>((resolve) =>
      setTimeout(() => {
        process.kill(victim, "SIGCONT");
        stopped = undefined;
        resolve();
      }, 1_500),
    );
    const answer = await reload();
    // Broken files right after the answer: each worker keeps what the reload gave it, all the same one.
    writeFileSync(policyFile, "tiers: [");
    writeFileSync(rlsFile, "domain: [");
    await woken;
    expect(answer.status, answer.body).toBe(200);
    const everywhere = { policy: new Set([expected.policy]), rls: new Set([expected.rls]) };
    expect(await limitsSeen()).toEqual(new Set(["200 1000"]));
    expect(await versionsSeen()).toEqual(everywhere);
    const body = JSON.parse(answer.body) as {
      version: string;
      rls: { result: string; version: string };
      workers: { pid: number; result: string; version: string; rls: { result: string; version: string } }[];
    };
    expect(body).toMatchObject({ version: expected.policy, rls: { version: expected.rls } });
    expect(body.workers.map((w) => w.pid).sort((a, b) => a - b)).toEqual(
      [victim, other].sort((a, b) => a - b),
    );
    for (const worker of body.workers) {
      expect(worker).toMatchObject({
        result: expect.stringMatching(TOOK),
        version: expected.policy,
        rls: { result: expect.stringMatching(TOOK), version: expected.rls },
      });
    }
    // The primary's watch reads the broken files once, for both workers: both refuse them alike.
    await waitFor(
      async () =>
        tollgate
          .output()
          .split("\n")
          .filter((l) => l.includes('"event":"policy_invalid"') && l.includes('"trigger":"file"')).length >=
        2,
      10_000,
      "both workers refusing the broken policy file",
    );
    expect(await versionsSeen()).toEqual(everywhere);
    expect(await limitsSeen()).toEqual(new Set(["200 1000"]));
  }, 60_000);

  it("says which worker did not confirm in time, and that worker still ends on the same reload", async () => {
    const expected = versionsOf(2000, 30);
    writeFileSync(policyFile, policyYaml(2000));
    writeFileSync(rlsFile, rlsYaml(30));
    await openPools();
    const { victim, other } = await stopOneWorker();
    const started = Date.now();
    const answer = await reload();
    expect(Date.now() - started).toBeGreaterThanOrEqual(RELOAD_WAIT_MS - 100);
    expect(answer.status, answer.body).toBe(503);
    const body = JSON.parse(answer.body) as {
      error: string;
      message: string;
      workers: { pid: number; result: string; version?: string }[];
    };
    expect(body.error).toBe("reload_incomplete");
    expect(body.message).toContain(`pid ${victim} (timeout)`);
    expect(body.workers.find((w) => w.pid === other)).toMatchObject({
      result: expect.stringMatching(TOOK),
      version: expected.policy,
    });
    expect(body.workers.find((w) => w.pid === victim)).toEqual({ pid: victim, result: "timeout" });
    expect(tollgate.output()).toContain('"event":"reload_incomplete"');
    // Woken up, the worker applies the reload it was sent: the version the other one confirmed.
    process.kill(victim, "SIGCONT");
    stopped = undefined;
    const everywhere = { policy: new Set([expected.policy]), rls: new Set([expected.rls]) };
    await waitFor(
      async () => {
        const seen = await versionsSeen();
        return [...seen.policy, ...seen.rls].join() === [expected.policy, expected.rls].join();
      },
      10_000,
      "the woken worker on the same versions",
    );
    expect(await versionsSeen()).toEqual(everywhere);
    expect(await limitsSeen()).toEqual(new Set(["200 2000"]));
  }, 60_000);

  it("refuses an invalid file on every worker alike, and lists them", async () => {
    const before = await call(`${tollgate.adminUrl}/admin/policy`, { headers: admin });
    const version = (JSON.parse(before.body) as { version: string }).version;
    writeFileSync(policyFile, "tiers: { free: { general: 10/1x } }\n");
    const answer = await reload();
    expect(answer.status, answer.body).toBe(422);
    const body = JSON.parse(answer.body) as {
      error: string;
      problems: string[];
      version: string;
      workers: { pid: number; result: string; version: string }[];
    };
    expect(body.error).toBe("invalid_policy");
    expect(body.problems.length).toBeGreaterThan(0);
    expect(body.version).toBe(version);
    expect(body.workers.map((w) => w.pid).sort((a, b) => a - b)).toEqual(childrenOf(primary));
    for (const worker of body.workers) expect(worker).toMatchObject({ result: "invalid", version });
  }, 30_000);
  it("reloads every worker on a SIGHUP sent to one worker, as to the primary", async () => {
    const signalled = () =>
      tollgate
        .output()
        .split("\n")
        .flatMap((line) => {
          if (!line.includes('"trigger":"signal"') || !line.includes('"event":"policy_')) return [];
          return [Number((JSON.parse(line) as { pid: number }).pid)];
        });
    const before = signalled().length;
    const workers = childrenOf(primary);
    process.kill(workers[0] as number, "SIGHUP");
    await waitFor(async () => signalled().length >= before + 2, 10_000, "both workers reloading");
    expect(new Set(signalled().slice(before))).toEqual(new Set(workers));
  }, 30_000);

  it("starts a worker that replaces a dead one on the policy the others run while the file on disk is broken", async () => {
    const expected = versionsOf(4000, 40);
    writeFileSync(policyFile, policyYaml(4000));
    writeFileSync(rlsFile, rlsYaml(40));
    expect((await reload()).status).toBe(200);
    writeFileSync(policyFile, "tiers: [");
    writeFileSync(rlsFile, "domain: [");
    const refused = await reload();
    expect(refused.status, refused.body).toBe(422);
    const [victim, other] = childrenOf(primary) as [number, number];
    process.kill(victim, "SIGKILL");
    const readyPids = () =>
      tollgate
        .output()
        .split("\n")
        .flatMap((l) => (l.includes('"event":"ready"') ? [(JSON.parse(l) as { pid: number }).pid] : []));
    let replacement = 0;
    await waitFor(
      async () => {
        replacement = childrenOf(primary).find((pid) => pid !== other && pid !== victim) ?? 0;
        return replacement !== 0 && readyPids().includes(replacement);
      },
      20_000,
      "a replacement worker ready",
    );
    const handed = tollgate
      .output()
      .split("\n")
      .find((l) => l.includes('"event":"worker_started_in_force"') && l.includes(`"pid":${replacement}`));
    expect(handed).toContain(`"version":"${expected.policy}"`);
    expect(handed).toContain(`"rlsVersion":"${expected.rls}"`);
    await openPools();
    expect(await limitsSeen()).toEqual(new Set(["200 4000"]));
    expect(await versionsSeen()).toEqual({
      policy: new Set([expected.policy]),
      rls: new Set([expected.rls]),
    });
    // A valid file later reaches the replacement as it reaches the other worker.
    const later = versionsOf(5000, 50);
    writeFileSync(policyFile, policyYaml(5000));
    writeFileSync(rlsFile, rlsYaml(50));
    const answer = await reload();
    expect(answer.status, answer.body).toBe(200);
    const workers = (JSON.parse(answer.body) as { workers: { pid: number; version: string }[] }).workers;
    expect(Object.fromEntries(workers.map((w) => [w.pid, w.version]))).toEqual({
      [other]: later.policy,
      [replacement]: later.policy,
    });
    expect(await limitsSeen()).toEqual(new Set(["200 5000"]));
    expect(await versionsSeen()).toEqual({ policy: new Set([later.policy]), rls: new Set([later.rls]) });
  }, 60_000);
});
