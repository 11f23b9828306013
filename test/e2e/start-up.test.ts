// What a first start tells its user: a setting the machine or the server refuses stops start-up
// with one line naming the setting, and nothing is left running.
import { spawn } from "node:child_process";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { login } from "../support/http-client.mjs";
import { freePort } from "../support/ports.js";
import {
  freeTollgatePorts,
  startTollgate,
  type TollgateProcess,
  tollgateEnv,
} from "../support/processes.mjs";
import { connectRedis, redisUrl, testPrefix, topologyEnv } from "../support/redis.js";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));

type Exit = { code: number | null; stdout: string; stderr: string };

/** Runs `node dist/src/main.js` until it exits by itself (or `limitMs` pass, which fails the test). */
async function runToExit(env: Record<string, string>, limitMs = 20_000): Promise<Exit> {
  const child = spawn(process.execPath, ["dist/src/main.js"], {
    cwd: ROOT,
    env: { ...tollgateEnv(await freeTollgatePorts()), LOG_FORMAT: "json", ...env },
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
    ["GRPC_PORT", "grpcPort"],
  ] as const)("stops start-up with exit 1 and one line naming %s", async (name, field) => {
    const exit = await withTakenPort(async (port) => {
      const ports = { ...(await freeTollgatePorts()), [field]: port };
      return { port, ...(await runToExit(tollgateEnv(ports))) };
    });
    expect(exit.code, exit.stderr).toBe(1);
    expect(exit.stderr).toContain(`tollgate: ${name}: ${exit.port} is in use on 127.0.0.1`);
    expect(exit.stderr).not.toMatch(/EADDRINUSE|\n\s+at /);
  });
});

describe("a Redis setting the server refuses", () => {
  it("stops start-up naming REDIS_URL when the server refuses its database, before any ready line", async () => {
    const exit = await runToExit({ REDIS_URL: `${redisUrl()}/99`, REDIS_KEY_PREFIX: testPrefix() });
    expect(exit.code, exit.stdout + exit.stderr).toBe(1);
    expect(exit.stderr).toMatch(
      /^tollgate: REDIS_URL: the server refuses database 99 \(ERR DB index is out of range\)/m,
    );
    expect(exit.stdout).not.toContain('"event":"ready"');
  });

  it("stops start-up naming REDIS_URL when it names a database other than 0 on a cluster node", async () => {
    const node = (topologyEnv("cluster").REDIS_CLUSTER_NODES as string).split(",")[0] as string;
    const exit = await runToExit({ REDIS_URL: `redis://${node}/1`, REDIS_KEY_PREFIX: testPrefix() });
    expect(exit.code, exit.stdout + exit.stderr).toBe(1);
    expect(exit.stderr).toMatch(
      /^tollgate: REDIS_URL: names database 1, but this Redis runs in cluster mode/m,
    );
  });

  it("stops start-up naming REDIS_SENTINEL_MASTER when the Sentinels answer but know no such master", async () => {
    const exit = await runToExit({
      ...topologyEnv("sentinel"),
      REDIS_SENTINEL_MASTER: "no-such-master",
      REDIS_KEY_PREFIX: testPrefix(),
    });
    expect(exit.code, exit.stdout + exit.stderr).toBe(1);
    expect(exit.stderr).toMatch(
      /^tollgate: REDIS_SENTINEL_MASTER: no Sentinel monitors a master named "no-such-master" \(the Sentinels at 127\.0\.0\.1:\d+/m,
    );
    expect(exit.stdout + exit.stderr).not.toContain("unreachable");
  });
});

describe("a Redis that does not answer, with JWT_SECRET unset", () => {
  it("stops start-up within seconds with exit 1 and one line saying JWT_SECRET removes the need", async () => {
    const began = Date.now();
    const exit = await runToExit({
      REDIS_URL: `redis://127.0.0.1:${await freePort()}`,
      REDIS_KEY_PREFIX: testPrefix(),
      JWT_SECRET: "",
    });
    expect(exit.code, exit.stdout + exit.stderr).toBe(1);
    expect(Date.now() - began).toBeLessThan(15_000);
    const lines = exit.stderr.trim().split("\n");
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(
      /^tollgate: the store is unreachable \(.*\) and JWT_SECRET is unset: .*Start Redis, or set JWT_SECRET/,
    );
    expect(exit.stdout).not.toContain('"event":"ready"');
  });
});

describe("a misspelt setting", () => {
  it("gets one warning naming the setting meant, and nothing else in the environment does", async () => {
    const tollgate = await startTollgate({
      LOG_FORMAT: "json",
      REDIS_ULR: "redis://127.0.0.1:6379",
      HOME: "/home/tollgate",
      NODE_OPTIONS: "--no-deprecation",
    });
    try {
      const warnings = tollgate
        .output()
        .split("\n")
        .filter((line) => line.includes('"event":"unknown_setting"'))
        .map((line) => JSON.parse(line) as { variable: string; closest: string; msg: string });
      expect(warnings).toEqual([
        expect.objectContaining({
          variable: "REDIS_ULR",
          closest: "REDIS_URL",
          msg: "REDIS_ULR is not a tollgate setting and is ignored: did you mean REDIS_URL?",
        }),
      ]);
      // Ignored indeed: the store is the memory one, and says so.
      expect(tollgate.output()).toContain('"event":"memory_store"');
    } finally {
      await tollgate.stop("SIGINT");
    }
  });
});

describe("tokens on Redis without JWT_SECRET (outside production)", () => {
  const me = (tollgate: TollgateProcess, token: string) =>
    fetch(`${tollgate.url}/me`, { headers: { authorization: `Bearer ${token}` } }).then((r) => r.status);
  // JWT_SECRET empty is JWT_SECRET unset; the walk-through's "With Redis" sets nothing else.
  const withoutSecret = (prefix: string, redis: Record<string, string> = { REDIS_URL: redisUrl() }) => ({
    ...redis,
    REDIS_KEY_PREFIX: prefix,
    JWT_SECRET: "",
  });

  it.each([
    ["one Redis", () => ({ REDIS_URL: redisUrl() })],
    ["a Redis Cluster", () => topologyEnv("cluster")],
  ])("survive a restart, as the users and sessions do, on %s", async (_, topology) => {
    const prefix = testPrefix();
    const first = await startTollgate(withoutSecret(prefix, topology()));
    const { access_token: token } = await login(first.url, "alice");
    expect(await me(first, token)).toBe(200);
    expect(await first.stop("SIGINT")).toBe(0);
    const second = await startTollgate(withoutSecret(prefix, topology()));
    try {
      expect(await me(second, token)).toBe(200);
    } finally {
      await second.stop("SIGINT");
    }
  });

  it("are accepted by every instance, however many start at once, and the secret is never logged", async () => {
    const prefix = testPrefix();
    const instances = await Promise.all([1, 2, 3].map(() => startTollgate(withoutSecret(prefix))));
    const redis = connectRedis();
    try {
      for (const issuer of instances) {
        const { access_token: token } = await login(issuer.url, "bob_pro");
        for (const other of instances) expect(await me(other, token)).toBe(200);
      }
      const secret = await redis.get(`${prefix}jwt:secret`);
      expect(secret?.length).toBeGreaterThanOrEqual(32);
      for (const tollgate of instances) {
        expect(tollgate.output()).not.toContain(secret);
        expect(tollgate.output()).toContain('"event":"jwt_secret_shared"');
        expect(tollgate.output()).not.toContain("jwt_secret_generated");
      }
    } finally {
      redis.disconnect();
      await Promise.all(instances.map((tollgate) => tollgate.stop("SIGINT")));
    }
  }, 60_000);
});
