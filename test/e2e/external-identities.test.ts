// Provider tokens and API keys through real tollgate processes: start-up settings, readiness that
// waits for the provider's keys, an API key revoked under load on two instances sharing one Redis
// (nothing allowed after the revocation's answer, on either), and the gRPC ext_authz front end.
import { spawn } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DEFAULT_POLICY_YAML } from "../../src/policy/policy.js";
import { grpcClients, headerRecord } from "../support/grpc-client.js";
import { makeKey, signToken, startJwksServer } from "../support/jwks-server.js";
import {
  freeTollgatePorts,
  startTollgate,
  type TollgateProcess,
  tollgateEnv,
} from "../support/processes.mjs";
import { redisUrl, testPrefix } from "../support/redis.js";
import { ADMIN_TOKEN } from "../support/secrets.mjs";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const admin = { authorization: `Bearer ${ADMIN_TOKEN}`, "content-type": "application/json" };
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function exitOf(env: Record<string, string>): Promise<{ code: number | null; stderr: string }> {
  const child = spawn(process.execPath, ["dist/src/main.js"], {
    cwd: ROOT,
    env: { ...tollgateEnv(await freeTollgatePorts()), LOG_FORMAT: "json", ...env },
    stdio: ["ignore", "ignore", "pipe"],
  });
  let stderr = "";
  child.stderr.on("data", (d: Buffer) => {
    stderr += d.toString();
  });
  const code = await new Promise<number | null>((resolve) => {
    const timer = setTimeout(() => child.kill("SIGKILL"), 15_000);
    child.once("exit", (c) => {
      clearTimeout(timer);
      resolve(c);
    });
  });
  return { code, stderr };
}

describe("provider settings at start-up", () => {
  it("stops with one line per missing setting when a JWKS is given without issuer and audience", async () => {
    const { code, stderr } = await exitOf({ JWKS_URL: "http://127.0.0.1:1/jwks.json" });
    expect(code).toBe(1);
    expect(stderr).toContain("JWT_ISSUER: required with OIDC_ISSUER or JWKS_URL");
    expect(stderr).toContain("JWT_AUDIENCE: required with OIDC_ISSUER or JWKS_URL");
  });

  it("refuses HS256 in the provider's allow-list, and a default tier the policy lacks", async () => {
    const base = { JWKS_URL: "http://127.0.0.1:1/j", JWT_ISSUER: "https://idp/", JWT_AUDIENCE: "a" };
    const hs = await exitOf({ ...base, JWT_PROVIDER_ALGORITHMS: "RS256,HS256" });
    expect(hs.code).toBe(1);
    expect(hs.stderr).toContain('JWT_PROVIDER_ALGORITHMS: "HS256" is not allowed');
    const tier = await exitOf({ ...base, EXTERNAL_DEFAULT_TIER: "gold" });
    expect(tier.code).toBe(1);
    expect(tier.stderr).toContain('EXTERNAL_DEFAULT_TIER: "gold" is not a tier of the policy');
  });

  it("refuses a JWT_TIER_MAP that maps to a tier the policy lacks (a typo would give the default tier)", async () => {
    const base = { JWKS_URL: "http://127.0.0.1:1/j", JWT_ISSUER: "https://idp/", JWT_AUDIENCE: "a" };
    const typo = await exitOf({ ...base, JWT_TIER_CLAIM: "plan", JWT_TIER_MAP: "basic=free,premium=por" });
    expect(typo.code).toBe(1);
    expect(typo.stderr).toContain('JWT_TIER_MAP: premium=por names "por", which is not a tier of the policy');
  });

  it("refuses a clock tolerance outside 0 to 300 s, in one line naming the variable", async () => {
    const base = { JWKS_URL: "http://127.0.0.1:1/j", JWT_ISSUER: "https://idp/", JWT_AUDIENCE: "a" };
    const { code, stderr } = await exitOf({ ...base, JWT_CLOCK_TOLERANCE_SECONDS: "600" });
    expect(code).toBe(1);
    const lines = stderr.split("\n").filter((l) => l.includes("JWT_CLOCK_TOLERANCE_SECONDS"));
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain(
      'JWT_CLOCK_TOLERANCE_SECONDS: expected a whole number from 0 to 300, got "600"',
    );
  });
});

describe("a policy reload with a provider", () => {
  it("refuses, on SIGHUP, a policy without EXTERNAL_DEFAULT_TIER, and provider tokens keep their tier", async () => {
    const key = makeKey("hup-1");
    const idp = await startJwksServer([key]);
    const file = join(mkdtempSync(join(tmpdir(), "tollgate-hup-")), "policy.yaml");
    writeFileSync(file, DEFAULT_POLICY_YAML);
    const tollgate = await startTollgate({
      POLICY_FILE: file,
      JWKS_URL: idp.jwksUrl,
      JWT_ISSUER: idp.issuer,
      JWT_AUDIENCE: "api://hup",
    });
    const check = () => {
      const now = Math.floor(Date.now() / 1000);
      const token = signToken(key, { iss: idp.issuer, aud: "api://hup", sub: "hup-sub", exp: now + 60 });
      return fetch(`${tollgate.checkUrl}/ext_authz/api/products`, {
        headers: { authorization: `Bearer ${token}` },
      });
    };
    try {
      expect((await check()).status).toBe(200);
      // The signal reloads at once, before the file watch has settled on the change.
      writeFileSync(file, DEFAULT_POLICY_YAML.replace(/^ {2}free: .*\n/m, ""));
      tollgate.child.kill("SIGHUP");
      const refused = /"event":"policy_invalid".*"trigger":"signal".*EXTERNAL_DEFAULT_TIER/;
      for (let waited = 0; waited < 5_000 && !refused.test(tollgate.output()); waited += 50) await sleep(50);
      expect(tollgate.output()).toMatch(refused);
      const after = await check();
      expect(after.status).toBe(200);
      expect(after.headers.get("x-user-tier")).toBe("free");
    } finally {
      await tollgate.stop();
      await idp.close();
    }
  });

  it("refuses a provider URL with a user or password, and never repeats one in its message", async () => {
    const base = { JWT_ISSUER: "https://idp/", JWT_AUDIENCE: "a" };
    const jwks = await exitOf({
      ...base,
      JWKS_URL: "http://idp:JwksPw_SECRET@127.0.0.1:1/jwks?key=Q_SECRET",
    });
    expect(jwks.code).toBe(1);
    expect(jwks.stderr).toContain("JWKS_URL: must not hold a user or password");
    const oidc = await exitOf({ ...base, OIDC_ISSUER: "not a url ?key=Q_SECRET" });
    expect(oidc.code).toBe(1);
    expect(oidc.stderr).toContain("OIDC_ISSUER: expected an http(s) URL");
    expect(`${jwks.stderr}${oidc.stderr}`).not.toMatch(/SECRET/);
  });

  it("wants https for the provider in production, unless on loopback or JWT_PROVIDER_ALLOW_HTTP=true", async () => {
    const base = { JWT_ISSUER: "https://idp/", JWT_AUDIENCE: "a", NODE_ENV: "production" };
    const plain = await exitOf({ ...base, JWKS_URL: "http://keycloak.auth.svc:8080/certs" });
    expect(plain.code).toBe(1);
    expect(plain.stderr).toContain("JWKS_URL: must be https in production");
    for (const env of [
      { ...base, JWKS_URL: "http://127.0.0.1:1/certs" },
      { ...base, JWKS_URL: "http://keycloak.auth.svc:8080/certs", JWT_PROVIDER_ALLOW_HTTP: "true" },
    ]) {
      expect((await exitOf(env)).stderr).not.toContain("must be https");
    }
  });
});

describe("readiness with a provider", () => {
  it("stays not ready while the provider is down, retrying, and turns ready with its first keys", async () => {
    const key = makeKey("ready-1");
    const idp = await startJwksServer([key]);
    idp.down = true;
    const upAfterMs = 2_500;
    setTimeout(() => {
      idp.down = false;
    }, upAfterMs);
    const started = performance.now();
    const tollgate = await startTollgate(
      { JWKS_URL: idp.jwksUrl, JWT_ISSUER: idp.issuer, JWT_AUDIENCE: "api://ready" },
      { readyMs: 20_000 },
    );
    try {
      expect(performance.now() - started).toBeGreaterThanOrEqual(upAfterMs - 100);
      const output = tollgate.output();
      expect(output).toContain("provider_keys_wait");
      expect(output).toContain("provider_keys_failed");
      const now = Math.floor(Date.now() / 1000);
      const token = signToken(key, { iss: idp.issuer, aud: "api://ready", sub: "ready-sub", exp: now + 60 });
      const res = await fetch(`${tollgate.checkUrl}/ext_authz/api/products`, {
        headers: { authorization: `Bearer ${token}` },
      });
      expect(res.status).toBe(200);
    } finally {
      await tollgate.stop();
      await idp.close();
    }
  });
});

describe("an API key on two instances sharing one Redis", () => {
  const env = {
    REDIS_URL: redisUrl(),
    REDIS_KEY_PREFIX: testPrefix(),
    LOG_LEVEL: "info",
    // What a revocation's answer guarantees, not latency: at the default 100 ms, eight loops of
    // checks on a 2-core machine miss the deadline, and an API key's check is then a 503 (only the
    // store knows a key), neither the 200 before nor the 401 after that the cases count.
    REDIS_TIMEOUT_MS: "1000",
  };
  let a: TollgateProcess;
  let b: TollgateProcess;
  beforeAll(async () => {
    [a, b] = await Promise.all([
      startTollgate(env, { name: "keys-a" }),
      startTollgate(env, { name: "keys-b" }),
    ]);
  });
  afterAll(async () => {
    await Promise.all([a?.stop(), b?.stop()]);
  });

  const newKey = async (tier = "enterprise") => {
    const res = await fetch(`${a.adminUrl}/admin/api-keys`, {
      method: "POST",
      headers: admin,
      body: JSON.stringify({ name: "load", tier }),
    });
    expect(res.status).toBe(201);
    return (await res.json()) as { id: string; key: string };
  };

  let ip = 0;
  const check = async (proc: TollgateProcess, key: string) => {
    ip += 1;
    const sentAt = performance.now();
    const res = await fetch(`${proc.checkUrl}/ext_authz/api/products`, {
      headers: { "x-api-key": key, "x-forwarded-for": `10.77.${(ip >> 8) & 255}.${ip & 255}` },
    });
    await res.arrayBuffer();
    return { status: res.status, sentAt };
  };

  it.each([
    ["an enterprise key, allowed until then", "enterprise"],
    ["a free key, refused 429 by then from each instance's denial cache", "free"],
  ])("allows no request sent after the revocation's answer, on either instance: %s", async (_, tier) => {
    const { id, key } = await newKey(tier);
    const answers: { status: number; sentAt: number }[] = [];
    let running = true;
    const loop = async (proc: TollgateProcess) => {
      while (running) answers.push(await check(proc, key));
    };
    const loops = [a, b, a, b, a, b, a, b].map(loop);
    await sleep(500);
    const revoke = await fetch(`${b.adminUrl}/admin/api-keys/${id}`, { method: "DELETE", headers: admin });
    const revokedAt = performance.now();
    expect(revoke.status).toBe(200);
    await sleep(500);
    running = false;
    await Promise.all(loops);
    const before = answers.filter((x) => x.sentAt < revokedAt);
    const after = answers.filter((x) => x.sentAt > revokedAt);
    expect(before.filter((x) => x.status === 200).length).toBeGreaterThan(20);
    // A free key's 100 an hour are spent well before the revocation: both instances refuse it from memory.
    if (tier === "free") expect(before.filter((x) => x.status === 429).length).toBeGreaterThan(20);
    expect(after.length).toBeGreaterThan(20);
    expect(after.filter((x) => x.status === 200)).toEqual([]);
    expect(after.every((x) => x.status === 401)).toBe(true);
    for (const proc of [a, b]) expect(proc.output()).not.toContain(key.slice(20));
  });

  it("carries a key through gRPC ext_authz, and refuses it there once revoked", async () => {
    const { id, key } = await newKey("pro");
    const grpc = grpcClients(a.grpcUrl);
    try {
      const input = { path: "/api/products", headers: { "x-api-key": key }, source: "10.78.0.1" };
      const allowed = await grpc.check(input);
      expect(allowed.status?.code ?? 0).toBe(0);
      expect(headerRecord(allowed.ok_response?.headers)["x-user-tier"]).toBe("pro");
      await fetch(`${a.adminUrl}/admin/api-keys/${id}`, { method: "DELETE", headers: admin });
      const refused = await grpc.check(input);
      expect(refused.status?.code).toBe(16);
    } finally {
      grpc.close();
    }
  });
});
