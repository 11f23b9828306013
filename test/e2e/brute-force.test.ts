// Password guessing through a real nginx: the per-IP login limit, the per-username lockout, no enumeration.
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DEFAULT_POLICY_YAML } from "../../src/policy/policy.js";
import { closeClient, type Reply, send } from "../support/http-client.mjs";
import { loopbackAddresses } from "../support/ports.js";
import {
  type Nginx,
  startNginx,
  startTollgate,
  startUpstream,
  type TollgateProcess,
  type UpstreamProcess,
} from "../support/processes.mjs";
import { redisUrl, testPrefix } from "../support/redis.js";

const PASSWORD = "brute-force-test-password";

let tollgate: TollgateProcess;
let upstream: UpstreamProcess;
let nginx: Nginx;

beforeAll(async () => {
  [tollgate, upstream] = await Promise.all([
    startTollgate({
      REDIS_URL: redisUrl(),
      REDIS_KEY_PREFIX: testPrefix(),
      LOG_LEVEL: "warn",
      // Exact counts, not latency: at the default 100 ms a starved machine answers a login's check
      // degraded, and the right password past the limit gets its 200 instead of the 429.
      REDIS_TIMEOUT_MS: "1000",
    }),
    startUpstream(),
  ]);
  nginx = await startNginx({
    checkPort: tollgate.checkPort,
    publicPort: tollgate.port,
    upstreamPort: upstream.port,
  });
});

afterAll(async () => {
  await nginx?.stop();
  await Promise.all([tollgate?.stop(), upstream?.stop()]);
  closeClient();
});

/** nginx sees every test client on loopback; each one takes a source address of its own. */
const newAddress = loopbackAddresses(40);

async function createUser(on: TollgateProcess = tollgate): Promise<string> {
  const username = `guessed_${randomBytes(5).toString("hex")}`;
  const res = await send(`${on.adminUrl}/admin/users`, {
    method: "POST",
    headers: { authorization: `Bearer ${on.adminToken}` },
    body: { username, password: PASSWORD, tier: "free" },
  });
  expect(res.status, res.text).toBe(201);
  return username;
}

const login = (username: string, password: string, address: string, via: Nginx = nginx): Promise<Reply> =>
  send(`${via.url}/auth/login`, { method: "POST", body: { username, password }, localAddress: address });

describe("the per-IP login limit through nginx", () => {
  it("answers 429 from the eleventh attempt of one address, even with the right password", async () => {
    const username = await createUser();
    const address = newAddress();
    const statuses: number[] = [];
    // Ten different usernames: the per-username lockout stays out of the way.
    for (let i = 0; i < 10; i += 1)
      statuses.push((await login(`nobody_${i}_${address}`, "guess", address)).status);
    expect(statuses).toEqual(Array(10).fill(401));
    const limited = await login(username, PASSWORD, address);
    expect(limited.status).toBe(429);
    expect(limited.header("content-type")).toMatch(/^application\/json/);
    const retryAfter = Number(limited.header("retry-after"));
    expect(retryAfter).toBeGreaterThan(0);
    expect(retryAfter).toBeLessThanOrEqual(15 * 60);
    expect(limited.json()).toMatchObject({
      error: "rate_limit_exceeded",
      category: "login",
      tier: "anonymous",
      limit: 10,
    });
    // The same credentials from another address work.
    expect((await login(username, PASSWORD, newAddress())).status).toBe(200);
  });
});

describe("the per-username lockout through nginx", () => {
  it("locks a username after ten failures spread over ten addresses, for the right password too", async () => {
    const username = await createUser();
    const statuses: number[] = [];
    for (let i = 0; i < 10; i += 1) statuses.push((await login(username, `wrong-${i}`, newAddress())).status);
    expect(statuses).toEqual(Array(10).fill(401));
    const fresh = newAddress();
    const locked = await login(username, PASSWORD, fresh);
    expect(locked.status).toBe(429);
    expect(Number(locked.header("retry-after"))).toBeGreaterThan(0);
    expect(locked.json()).toMatchObject({ error: "rate_limit_exceeded" });
    // The address is not what was locked: another user logs in from it.
    const other = await createUser();
    expect((await login(other, PASSWORD, fresh)).status).toBe(200);
  });

  it("refuses only logins of a locked name: a session opened before goes on working", async () => {
    const username = await createUser();
    const session = await login(username, PASSWORD, newAddress());
    expect(session.status).toBe(200);
    const token = session.json<{ access_token: string }>().access_token;
    // Someone else fills the name's window from one address (its whole login limit).
    const attacker = newAddress();
    for (let i = 0; i < 10; i += 1) expect((await login(username, `wrong-${i}`, attacker)).status).toBe(401);
    expect((await login(username, PASSWORD, newAddress())).status).toBe(429);
    for (const path of ["/api/products", "/me"]) {
      const res = await send(`${nginx.url}${path}`, { headers: { authorization: `Bearer ${token}` } });
      expect(res.status, `${path}: ${res.text}`).toBe(200);
    }
  });

  it("locks an unknown username exactly as it locks a real one", async () => {
    const real = await createUser();
    const ghost = `ghost_${randomBytes(5).toString("hex")}`;
    for (const name of [real, ghost]) {
      for (let i = 0; i < 10; i += 1)
        expect((await login(name, `wrong-${i}`, newAddress())).status).toBe(401);
    }
    const [realLocked, ghostLocked] = [
      await login(real, PASSWORD, newAddress()),
      await login(ghost, PASSWORD, newAddress()),
    ];
    expect(realLocked.status).toBe(429);
    expect(ghostLocked.status).toBe(429);
    expect(ghostLocked.text).toBe(realLocked.text);
  });
});

describe("the per-username lockout behind a generous per-address login limit", () => {
  // An office behind one NAT: the policy lets its one address log in 1000 times in 15 minutes. This
  // tollgate runs on the memory store (the one above on Redis): the lockout is the same on both.
  let dir: string;
  let office: TollgateProcess;
  let officeNginx: Nginx;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "tollgate-nat-"));
    const policyFile = join(dir, "policy.yaml");
    const generous = DEFAULT_POLICY_YAML.replace("login: 10/15m", "login: 1000/15m");
    expect(generous).not.toBe(DEFAULT_POLICY_YAML);
    writeFileSync(policyFile, generous);
    office = await startTollgate({ POLICY_FILE: policyFile, LOG_LEVEL: "warn" });
    officeNginx = await startNginx({
      checkPort: office.checkPort,
      publicPort: office.port,
      upstreamPort: upstream.port,
    });
  });

  afterAll(async () => {
    await officeNginx?.stop();
    await office?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it("locks a username after ten wrong passwords from one address, the right one included", async () => {
    const username = await createUser(office);
    const address = newAddress();
    const statuses: number[] = [];
    for (let i = 0; i < 25; i += 1)
      statuses.push((await login(username, `wrong-${i}`, address, officeNginx)).status);
    expect(statuses).toEqual([...Array(10).fill(401), ...Array(15).fill(429)]);
    const locked = await login(username, PASSWORD, address, officeNginx);
    expect(locked.status).toBe(429);
    expect(Number(locked.header("retry-after"))).toBeGreaterThan(0);
    // The address itself is far from its limit: another user logs in from it.
    expect((await login(await createUser(office), PASSWORD, address, officeNginx)).status).toBe(200);
  });
});

/** The headers that may differ between two answers for reasons other than the username. */
const VOLATILE = new Set([
  "date",
  "x-ratelimit-reset",
  "ratelimit",
  "retry-after",
  "x-ratelimit-remaining",
  "x-ratelimit-used",
]);
const stableHeaders = (reply: Reply): Record<string, string[]> =>
  Object.fromEntries(Object.entries(reply.headers).filter(([name]) => !VOLATILE.has(name)));

describe("unknown user versus wrong password through nginx", () => {
  it("answers both with the same status, headers and body", async () => {
    const username = await createUser();
    const wrong = await login(username, "not-the-password", newAddress());
    const unknown = await login(
      `unknown_${randomBytes(5).toString("hex")}`,
      "not-the-password",
      newAddress(),
    );
    expect(wrong.status).toBe(401);
    expect(unknown.status).toBe(401);
    expect(unknown.text).toBe(wrong.text);
    expect(wrong.json()).toEqual({ error: "unauthorized", message: "Invalid username or password" });
    expect(stableHeaders(unknown)).toEqual(stableHeaders(wrong));
  });

  it("takes about as long for both, as both derive a scrypt key (medians within a generous factor)", async () => {
    // Without the decoy hash an unknown user would answer in ~1 ms against tens of ms for scrypt.
    // The authoritative check counts scrypt calls (test/integration/login-enumeration.test.ts);
    // this one only guards the wire with a wide margin, interleaved so load hits both alike.
    const username = await createUser();
    const wrongTimes: number[] = [];
    const unknownTimes: number[] = [];
    const timed = async (name: string): Promise<number> => {
      const started = performance.now();
      const res = await login(name, "not-the-password", newAddress());
      expect(res.status).toBe(401);
      return performance.now() - started;
    };
    for (let i = 0; i < 8; i += 1) {
      wrongTimes.push(await timed(username));
      unknownTimes.push(await timed(`unknown_${randomBytes(5).toString("hex")}`));
    }
    const median = (values: number[]): number => {
      const sorted = [...values].sort((a, b) => a - b);
      return ((sorted[3] as number) + (sorted[4] as number)) / 2;
    };
    const [w, u] = [median(wrongTimes), median(unknownTimes)];
    expect(u, `unknown ${u.toFixed(1)} ms vs wrong password ${w.toFixed(1)} ms`).toBeGreaterThan(w / 4);
    expect(w, `wrong password ${w.toFixed(1)} ms vs unknown ${u.toFixed(1)} ms`).toBeGreaterThan(u / 4);
  });
});
