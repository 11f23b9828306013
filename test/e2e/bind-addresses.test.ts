// Bind addresses of the real process: HOST, CHECK_HOST and ADMIN_HOST, and the warning about an open /metrics.

import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { grpcClients } from "../support/grpc-client.js";
import { startTollgate, type TollgateProcess } from "../support/processes.mjs";
import { redisUrl, testPrefix } from "../support/redis.js";

/** The status of GET `url`, or the error code when nothing listens there. */
async function reach(url: string): Promise<number | string> {
  try {
    return (await fetch(url, { signal: AbortSignal.timeout(3_000) })).status;
  } catch (error) {
    return ((error as Error).cause as NodeJS.ErrnoException | undefined)?.code ?? (error as Error).message;
  }
}

const linesWith = (output: string, event: string): string[] =>
  output.split("\n").filter((line) => line.includes(`"event":"${event}"`));

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "tollgate-hosts-"));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("bind addresses", () => {
  let tollgate: TollgateProcess | undefined;
  afterAll(async () => {
    await tollgate?.stop();
  });

  // Every 127.0.0.0/8 address is this machine's on Linux: three loopback addresses tell the listeners apart.
  it("binds the public listener to HOST, the check listener to CHECK_HOST, the admin one to ADMIN_HOST and the gRPC one to GRPC_HOST", async () => {
    tollgate = await startTollgate({
      HOST: "127.0.0.1",
      CHECK_HOST: "127.0.0.2",
      ADMIN_HOST: "127.0.0.3",
      GRPC_HOST: "127.0.0.4",
    });
    const { port, checkPort, adminPort, grpcPort } = tollgate;
    const grpc = grpcClients(`http://127.0.0.4:${grpcPort}`);
    expect(await grpc.health("")).toEqual({ status: 1 });
    grpc.close();
    expect(await reach(`http://127.0.0.1:${grpcPort}/`)).toBe("ECONNREFUSED");
    expect(await reach(`http://127.0.0.1:${port}/health`)).toBe(200);
    expect(await reach(`http://127.0.0.2:${checkPort}/ext_authz/health`)).toBe(200);
    expect(await reach(`http://127.0.0.3:${adminPort}/health`)).toBe(200);
    expect(await reach(`http://127.0.0.1:${checkPort}/ext_authz/health`)).toBe("ECONNREFUSED");
    expect(await reach(`http://127.0.0.1:${adminPort}/health`)).toBe("ECONNREFUSED");
    expect(await reach(`http://127.0.0.2:${port}/health`)).toBe("ECONNREFUSED");
    const [ready] = linesWith(tollgate.output(), "ready");
    expect(JSON.parse(ready ?? "{}").urls).toEqual({
      public: `http://127.0.0.1:${port}`,
      check: `http://127.0.0.2:${checkPort}`,
      admin: `http://127.0.0.3:${adminPort}`,
      grpc: `http://127.0.0.4:${grpcPort}`,
    });
    // Outside production an open /metrics is no news.
    expect(linesWith(tollgate.output(), "metrics_unprotected")).toEqual([]);
  });
});

describe("production with /metrics open beyond loopback", () => {
  let tollgate: TollgateProcess | undefined;
  afterAll(async () => {
    await tollgate?.stop();
  });

  it("warns in one log line at start-up, however many workers serve", async () => {
    const usersFile = join(dir, "users.json");
    writeFileSync(
      usersFile,
      JSON.stringify([{ username: "ops_user", tier: "pro", password: "prod-user-password-Zq8!vX2#" }]),
    );
    tollgate = await startTollgate(
      {
        NODE_ENV: "production",
        JWT_SECRET: randomBytes(48).toString("base64"),
        ADMIN_TOKEN: randomBytes(48).toString("base64"),
        USERS_FILE: usersFile,
        REDIS_URL: redisUrl(),
        REDIS_KEY_PREFIX: testPrefix(),
        WORKERS: "2",
        HOST: "127.0.0.1",
        ADMIN_HOST: "0.0.0.0",
      },
      { readyMs: 30_000 },
    );
    // Both workers are up (each logs its own ready line) before the count.
    await expect.poll(() => linesWith(tollgate?.output() ?? "", "ready").length, { timeout: 15_000 }).toBe(2);
    const warnings = linesWith(tollgate.output(), "metrics_unprotected");
    expect(warnings).toHaveLength(1);
    expect(JSON.parse(warnings[0] ?? "{}")).toMatchObject({ level: "warn" });
    expect(warnings[0]).toContain("METRICS_TOKEN");
    expect(await reach(`http://127.0.0.1:${tollgate.adminPort}/metrics`)).toBe(200);
  });
});
