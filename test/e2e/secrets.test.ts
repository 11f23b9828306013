// Secrets: production refuses missing, short and demo credentials; no secret reaches logs, bodies or metrics.
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { demoUsers } from "../../src/auth/users-file.js";
import { createRedisStore } from "../../src/store/store.js";
import { closeClient, login, type Reply, send } from "../support/http-client.mjs";
import { freePort, waitFor } from "../support/ports.js";
import { startTollgate, type TollgateProcess } from "../support/processes.mjs";
import { rawRequest } from "../support/raw-http.js";
import { connectRedis, redisUrl, testPrefix } from "../support/redis.js";
import { JWT_SECRET as TEST_JWT_SECRET, METRICS_TOKEN as TEST_METRICS_TOKEN } from "../support/secrets.mjs";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
// Made per run: production refuses every secret written in this repository, tests' included.
const GOOD_JWT_SECRET = randomBytes(48).toString("base64");
const GOOD_ADMIN_TOKEN = randomBytes(48).toString("base64");
const METRICS_TOKEN = randomBytes(24).toString("base64url");
const USER_PASSWORD = "prod-user-password-Zq8!vX2#";

let dir: string;
let usersFile: string;

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "tollgate-secrets-"));
  usersFile = join(dir, "users.json");
  writeFileSync(
    usersFile,
    JSON.stringify([{ id: "prod-user", username: "prod_user", tier: "pro", password: USER_PASSWORD }]),
  );
});

afterAll(() => {
  closeClient();
  rmSync(dir, { recursive: true, force: true });
});

type Exit = { code: number | null; output: string; stderr: string };

/** Runs `node dist/src/main.js` until it exits by itself (or 15 s pass, which fails the test). */
async function runToExit(env: Record<string, string>): Promise<Exit> {
  const [port, checkPort, adminPort, grpcPort] = [
    await freePort(),
    await freePort(),
    await freePort(),
    await freePort(),
  ];
  const child = spawn(process.execPath, ["dist/src/main.js"], {
    cwd: ROOT,
    env: {
      PATH: process.env.PATH ?? "",
      HOST: "127.0.0.1",
      PORT: String(port),
      CHECK_PORT: String(checkPort),
      ADMIN_PORT: String(adminPort),
      GRPC_PORT: String(grpcPort),
      NODE_ENV: "production",
      ENV_FILE: "", // never a developer's .env: its secrets would hide the ones a test leaves out
      ...env,
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  let stderr = "";
  child.stdout.on("data", (d: Buffer) => {
    output += d.toString();
  });
  child.stderr.on("data", (d: Buffer) => {
    output += d.toString();
    stderr += d.toString();
  });
  const code = await new Promise<number | null>((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`still running after 15 s:\n${output}`));
    }, 15_000);
    child.once("exit", (exitCode) => {
      clearTimeout(timer);
      resolve(exitCode);
    });
  });
  return { code, output, stderr };
}

describe("production start-up refuses weak or missing credentials", () => {
  const base = { JWT_SECRET: GOOD_JWT_SECRET, ADMIN_TOKEN: GOOD_ADMIN_TOKEN, USERS_FILE: "" };
  const withUsers = () => ({ ...base, USERS_FILE: usersFile });
  const short = "short-secret-of-31-bytes-xxxxxx";

  it("exits 1 naming JWT_SECRET when it is missing", async () => {
    const { JWT_SECRET: _, ...env } = withUsers();
    const exit = await runToExit(env);
    expect(exit.code).toBe(1);
    expect(exit.stderr).toContain("JWT_SECRET: required when NODE_ENV=production");
  });

  it("exits 1 naming JWT_SECRET when it is shorter than 32 bytes, without printing it", async () => {
    expect(Buffer.byteLength(short)).toBe(31);
    const exit = await runToExit({ ...withUsers(), JWT_SECRET: short });
    expect(exit.code).toBe(1);
    expect(exit.stderr).toContain("JWT_SECRET: must be at least 32 bytes long");
    expect(exit.output).not.toContain(short);
  });

  it("counts bytes, not characters: 15 two-byte characters are too short, 16 are enough", async () => {
    const tooShort = await runToExit({ ...withUsers(), JWT_SECRET: "é".repeat(15) });
    expect(tooShort.code).toBe(1);
    expect(tooShort.stderr).toContain("JWT_SECRET: must be at least 32 bytes long");
    const { ADMIN_TOKEN: _, ...env } = withUsers();
    // 16 different two-byte characters: 32 bytes, and varied enough to pass as a secret.
    const varied = [..."àáâãäåæçèéêëìíîï"].sort(() => Math.random() - 0.5).join("");
    const enough = await runToExit({ ...env, JWT_SECRET: varied });
    expect(enough.code).toBe(1);
    expect(enough.stderr).toContain("ADMIN_TOKEN: required");
    expect(enough.stderr).not.toContain("JWT_SECRET");
  });

  it("exits 1 naming ADMIN_TOKEN when it is missing", async () => {
    const { ADMIN_TOKEN: _, ...env } = withUsers();
    const exit = await runToExit(env);
    expect(exit.code).toBe(1);
    expect(exit.stderr).toContain("ADMIN_TOKEN: required when NODE_ENV=production");
    // Outside production a missing token is generated and printed once; in production, never.
    expect(exit.output).not.toMatch(/admin token is/i);
  });

  it("exits 1 naming ADMIN_TOKEN when it is shorter than 32 bytes, without printing it", async () => {
    const exit = await runToExit({ ...withUsers(), ADMIN_TOKEN: short });
    expect(exit.code).toBe(1);
    expect(exit.stderr).toContain("ADMIN_TOKEN: must be at least 32 bytes long");
    expect(exit.output).not.toContain(short);
  });

  it("exits 1 naming each secret set to a value published in the repository, without printing it", async () => {
    // The compose file's demo fallbacks and the test suites' constants are public: anyone could use them.
    const compose = readFileSync(join(ROOT, "docker-compose.yml"), "utf8");
    const composeAdmin = /ADMIN_TOKEN:-([^}]+)\}/.exec(compose)?.[1];
    expect(composeAdmin).toBeDefined();
    const exit = await runToExit({
      ...withUsers(),
      JWT_SECRET: TEST_JWT_SECRET,
      ADMIN_TOKEN: composeAdmin as string,
      METRICS_TOKEN: TEST_METRICS_TOKEN,
    });
    expect(exit.code).toBe(1);
    for (const name of ["JWT_SECRET", "ADMIN_TOKEN", "METRICS_TOKEN"]) {
      expect(exit.stderr).toContain(`${name}: this value is published in tollgate's repository`);
    }
    expect(exit.output).not.toContain(TEST_JWT_SECRET);
    expect(exit.output).not.toContain(composeAdmin);
  });

  it("exits 1 naming a secret of too little entropy", async () => {
    for (const weak of ["x".repeat(48), "ab".repeat(24), "abcdefghijklmnopqrstuvwxyz0123456789"]) {
      const exit = await runToExit({ ...withUsers(), ADMIN_TOKEN: weak });
      expect(exit.code, weak).toBe(1);
      expect(exit.stderr, weak).toContain("ADMIN_TOKEN: too predictable");
      expect(exit.output, weak).not.toContain(weak);
    }
  });

  it("reports every problem at once, one line each", async () => {
    const exit = await runToExit({ USERS_FILE: usersFile, JWT_SECRET: "   " });
    expect(exit.code).toBe(1);
    const lines = exit.stderr.split("\n").filter((line) => line.startsWith("tollgate: "));
    expect(lines.some((l) => l.includes("JWT_SECRET: required"))).toBe(true);
    expect(lines.some((l) => l.includes("ADMIN_TOKEN: required"))).toBe(true);
  });

  it("exits 1 instead of loading the demo users when Redis holds no users and USERS_FILE is unset", async () => {
    const exit = await runToExit({ ...base, REDIS_URL: redisUrl(), REDIS_KEY_PREFIX: testPrefix() });
    expect(exit.code).toBe(1);
    expect(exit.output).toContain("USERS_FILE: required in production when the store holds no users");
    expect(exit.output).not.toMatch(/"event":"users_loaded"/);
  });

  it("exits 1 instead of loading the demo users on the in-memory store", async () => {
    const exit = await runToExit(base);
    expect(exit.code).toBe(1);
    expect(exit.output).toContain("USERS_FILE: required in production when the store holds no users");
  });
});

describe("demo users in production", () => {
  const started: TollgateProcess[] = [];
  afterAll(async () => {
    await Promise.all(started.map((p) => p.stop()));
  });
  const start = async (env: Record<string, string>): Promise<TollgateProcess> => {
    const running = await startTollgate(env);
    started.push(running);
    return running;
  };
  const checkStatus = async (tollgate: TollgateProcess, token: string): Promise<number> =>
    (
      await send(`${tollgate.checkUrl}/ext_authz/api/products`, {
        headers: { authorization: `Bearer ${token}` },
      })
    ).status;

  const keyStatus = async (tollgate: TollgateProcess, key: string): Promise<number> =>
    (await send(`${tollgate.checkUrl}/ext_authz/api/products`, { headers: { "x-api-key": key } })).status;
  /** An API key that acts for alice, made through the admin API of a tollgate outside production. */
  const aliceKey = async (tollgate: TollgateProcess): Promise<string> => {
    const created = await send(`${tollgate.adminUrl}/admin/api-keys`, {
      method: "POST",
      headers: { authorization: `Bearer ${tollgate.adminToken}` },
      body: { name: "alice's", tier: "enterprise", user_id: "demo-alice" },
    });
    expect(created.status, created.text).toBe(201);
    return created.json<{ key: string }>().key;
  };

  it("never log in or pass a check, even when a Redis loaded outside production still holds them", async () => {
    const shared = { REDIS_URL: redisUrl(), REDIS_KEY_PREFIX: testPrefix(), JWT_SECRET: GOOD_JWT_SECRET };
    const demo = await start(shared);
    const before = (await login(demo.url, "alice")).access_token;
    expect(await checkStatus(demo, before)).toBe(200);
    const key = await aliceKey(demo);
    expect(await keyStatus(demo, key)).toBe(200);
    await demo.stop();

    const production = await start({
      ...shared,
      NODE_ENV: "production",
      ADMIN_TOKEN: GOOD_ADMIN_TOKEN,
      USERS_FILE: usersFile,
      LOG_LEVEL: "info",
    });
    await waitFor(
      async () => production.output().includes("demo_users_removed"),
      10_000,
      "demo users removed",
    );
    expect(production.output()).toMatch(
      /"level":"warn",[^\n]*"event":"demo_users_removed","count":3,"apiKeys":1/,
    );
    const refused = await send(`${production.url}/auth/login`, {
      method: "POST",
      body: { username: "alice", password: "secret" },
    });
    expect(refused.status).toBe(401);
    expect(await checkStatus(production, before)).toBe(401);
    // Deleted with alice, not only refused here: no tollgate accepts the key any more.
    expect(await keyStatus(production, key)).toBe(401);

    // Someone puts them back into the store while production runs (here: the store API, then a
    // tollgate outside production on the same Redis): production still refuses them, at login
    // and at the check.
    const store = createRedisStore({ redis: connectRedis(), prefix: shared.REDIS_KEY_PREFIX });
    for (const user of demoUsers()) expect(await store.users.create(user)).not.toBe("exists");
    await store.close();
    const again = await start(shared);
    const fresh = (await login(again.url, "alice")).access_token;
    expect(await checkStatus(again, fresh)).toBe(200);
    expect(await checkStatus(production, fresh)).toBe(401);
    expect(await keyStatus(again, key)).toBe(401);
    // A key made for alice once she is back acts for her outside production only.
    const freshKey = await aliceKey(again);
    expect(await keyStatus(again, freshKey)).toBe(200);
    expect(await keyStatus(production, freshKey)).toBe(401);
    const stillRefused = await send(`${production.url}/auth/login`, {
      method: "POST",
      body: { username: "alice", password: "secret" },
    });
    expect(stillRefused.status).toBe(401);
  });
});

describe("a production tollgate keeps its secrets", () => {
  let tollgate: TollgateProcess;
  const bodies: Reply[] = [];
  const tokens: string[] = [];
  const sessionIds: string[] = [];
  const leaked = [
    GOOD_JWT_SECRET,
    GOOD_ADMIN_TOKEN,
    METRICS_TOKEN,
    USER_PASSWORD,
    "wrong-password-LEAKME-1",
    "malformed-LEAKME-2",
    "wrong-admin-token-LEAKME-3-xxxxxxxxxxxxxxxx",
    "created-user-password-LEAKME-4",
  ];
  const keep = (reply: Reply): Reply => {
    bodies.push(reply);
    return reply;
  };

  beforeAll(async () => {
    tollgate = await startTollgate({
      NODE_ENV: "production",
      JWT_SECRET: GOOD_JWT_SECRET,
      ADMIN_TOKEN: GOOD_ADMIN_TOKEN,
      METRICS_TOKEN,
      USERS_FILE: usersFile,
      REDIS_URL: redisUrl(),
      REDIS_KEY_PREFIX: testPrefix(),
      LOG_LEVEL: "trace",
    });
    const admin = { authorization: `Bearer ${GOOD_ADMIN_TOKEN}` };
    await waitFor(
      async () =>
        (await send(`${tollgate.adminUrl}/admin/users/prod-user/sessions`, { headers: admin })).status ===
        200,
      10_000,
      "USERS_FILE loaded",
    );
  });

  afterAll(async () => {
    await tollgate?.stop();
  });

  it("refuses the demo users' credentials", async () => {
    const res = keep(
      await send(`${tollgate.url}/auth/login`, {
        method: "POST",
        body: { username: "alice", password: "secret" },
      }),
    );
    expect(res.status).toBe(401);
  });

  it("answers every kind of request without echoing a secret, token or password", async () => {
    const login = keep(
      await send(`${tollgate.url}/auth/login`, {
        method: "POST",
        body: { username: "prod_user", password: USER_PASSWORD },
        headers: { "x-device-name": "laptop" },
      }),
    );
    expect(login.status).toBe(200);
    const { access_token: token, session_id: sid } = login.json<{
      access_token: string;
      session_id: string;
    }>();
    tokens.push(token);
    sessionIds.push(sid);
    const auth = { authorization: `Bearer ${token}` };

    expect(keep(await send(`${tollgate.url}/me`, { headers: auth })).status).toBe(200);
    expect(keep(await send(`${tollgate.checkUrl}/ext_authz/api/products`, { headers: auth })).status).toBe(
      200,
    );
    const tampered = `${token.slice(0, -4)}AAAA`;
    tokens.push(tampered);
    for (const reply of [
      await send(`${tollgate.checkUrl}/ext_authz/api/products`, {
        headers: { authorization: `Bearer ${tampered}` },
      }),
      await send(`${tollgate.checkUrl}/nginx/auth`, {
        headers: {
          authorization: `Bearer ${tampered}`,
          "x-original-method": "GET",
          "x-original-uri": "/api/products",
        },
      }),
      await send(`${tollgate.url}/me`, { headers: { authorization: `Bearer ${tampered}` } }),
    ]) {
      expect(keep(reply).status).toBe(401);
    }
    const wrong = keep(
      await send(`${tollgate.url}/auth/login`, {
        method: "POST",
        body: { username: "prod_user", password: "wrong-password-LEAKME-1" },
      }),
    );
    expect(wrong.status).toBe(401);
    const malformed = keep(
      await send(`${tollgate.url}/auth/login`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: '{"username":"prod_user","password":"malformed-LEAKME-2",',
      }),
    );
    expect(malformed.status).toBe(400);
    const tooLong = keep(
      await send(`${tollgate.url}/auth/login`, {
        method: "POST",
        body: { username: "prod_user", password: `malformed-LEAKME-2${"x".repeat(2000)}` },
      }),
    );
    expect(tooLong.status).toBe(400);
    const wrongAdmin = keep(
      await send(`${tollgate.adminUrl}/admin/users/prod-user/sessions`, {
        headers: { authorization: "Bearer wrong-admin-token-LEAKME-3-xxxxxxxxxxxxxxxx" },
      }),
    );
    expect(wrongAdmin.status).toBe(401);
    const created = keep(
      await send(`${tollgate.adminUrl}/admin/users`, {
        method: "POST",
        headers: { authorization: `Bearer ${GOOD_ADMIN_TOKEN}` },
        body: { username: `secret_${Date.now()}`, password: "created-user-password-LEAKME-4", tier: "free" },
      }),
    );
    expect(created.status).toBe(201);
    const badCreate = keep(
      await send(`${tollgate.adminUrl}/admin/users`, {
        method: "POST",
        headers: { authorization: `Bearer ${GOOD_ADMIN_TOKEN}` },
        body: { username: "x", password: "created-user-password-LEAKME-4", tier: "no-such-tier" },
      }),
    );
    expect(badCreate.status).toBe(400);
    const sessions = keep(
      await send(`${tollgate.adminUrl}/admin/users/prod-user/sessions`, {
        headers: { authorization: `Bearer ${GOOD_ADMIN_TOKEN}` },
      }),
    );
    expect(sessions.status).toBe(200);
    const raw = await rawRequest(
      tollgate.url,
      `POST /auth/login HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${token}\r\nX-Bad: a\u0001b\r\nConnection: close\r\n\r\n`,
    );
    expect(raw.status).toBe(400);
    expect(raw.raw).not.toContain(token);
    const secrets = [...leaked, ...tokens];
    // The login answer is the one place a token belongs.
    for (const reply of bodies.filter((r) => r !== login)) {
      const everything = `${reply.text}\n${JSON.stringify(reply.headers)}`;
      for (const secret of secrets)
        expect(everything, `a reply leaked ${secret.slice(0, 12)}…`).not.toContain(secret);
    }
  });

  it("keeps /metrics behind METRICS_TOKEN and free of secrets, tokens, user ids and addresses", async () => {
    expect((await send(`${tollgate.adminUrl}/metrics`)).status).toBe(401);
    expect(
      (
        await send(`${tollgate.adminUrl}/metrics`, {
          headers: { authorization: `Bearer ${GOOD_ADMIN_TOKEN}` },
        })
      ).status,
    ).toBe(401);
    const metrics = await send(`${tollgate.adminUrl}/metrics`, {
      headers: { authorization: `Bearer ${METRICS_TOKEN}` },
    });
    expect(metrics.status).toBe(200);
    expect(metrics.text).toContain("tollgate_decisions_total");
    for (const secret of [...leaked, ...tokens, ...sessionIds, "prod-user", "prod_user", "127.0.0.1"]) {
      expect(metrics.text, `metrics hold ${secret.slice(0, 12)}…`).not.toContain(secret);
    }
  });

  it("logs at trace level without any secret, token, password or full session id", async () => {
    await tollgate.stop();
    const output = tollgate.output();
    // The log is there to be searched: logins and their failures were written.
    expect(output).toContain("login succeeded");
    expect(output).toContain("login failed");
    for (const secret of [...leaked, ...tokens, ...sessionIds]) {
      expect(output, `the log holds ${secret.slice(0, 12)}…`).not.toContain(secret);
    }
    // Nor any part of a token long enough to be its signature.
    for (const token of tokens) expect(output).not.toContain(token.split(".")[2]);
    expect(output).not.toMatch(/scrypt\$\d+\$/);
  });
});
