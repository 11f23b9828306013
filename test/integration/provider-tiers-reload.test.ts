// A policy reload must keep the tiers the provider settings name: EXTERNAL_DEFAULT_TIER (without it
// every provider subject whose token names no known tier gets 401) and JWT_TIER_MAP's targets. Each
// reload path (the admin call, the file watch, the signal's) refuses such a policy as it refuses an
// invalid file, and the policy in force stays. Against the tests' own JWKS server.
import { randomBytes } from "node:crypto";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { DEFAULT_POLICY_YAML } from "../../src/policy/policy.js";
import { type InProcessOnRedis, sleep, startInProcess } from "../support/in-process.js";
import {
  type JwksServer,
  makeKey,
  signToken,
  startJwksServer,
  type TestKey,
} from "../support/jwks-server.js";

const AUDIENCE = "api://tiers";
const dir = mkdtempSync(join(tmpdir(), "tollgate-provider-tiers-"));
const file = join(dir, "policy.yaml");
/** The built-in policy without one tier (its line), which no route needs alone. */
const without = (tier: string) => DEFAULT_POLICY_YAML.replace(new RegExp(`^ {2}${tier}: .*\\n`, "m"), "");

let idp: JwksServer;
let key: TestKey;
let t: InProcessOnRedis;
let ips = 0;

beforeAll(async () => {
  writeFileSync(file, DEFAULT_POLICY_YAML);
  key = makeKey("tiers-1");
  idp = await startJwksServer([key]);
  t = await startInProcess({
    env: {
      LOG_LEVEL: "info",
      POLICY_FILE: file,
      JWKS_URL: idp.jwksUrl,
      JWT_ISSUER: idp.issuer,
      JWT_AUDIENCE: AUDIENCE,
      JWT_TIER_CLAIM: "plan",
      JWT_TIER_MAP: "basic=free,corporate=enterprise",
      EXTERNAL_DEFAULT_TIER: "free",
    },
  });
  await t.tollgate.providerKeys?.ready();
});
afterAll(async () => {
  await t?.close();
  await idp?.close();
});
beforeEach(() => {
  writeFileSync(file, DEFAULT_POLICY_YAML);
  expect(t.tollgate.reloadPolicy("admin").ok).toBe(true);
});

const check = async (claims: Record<string, unknown> = {}) => {
  ips += 1;
  const now = Math.floor(Date.now() / 1000);
  const sub = `tiers-${randomBytes(4).toString("hex")}`;
  const token = signToken(key, { iss: idp.issuer, aud: AUDIENCE, sub, exp: now + 120, ...claims });
  const res = await fetch(`${t.checkUrl}/ext_authz/api/products`, {
    headers: { authorization: `Bearer ${token}`, "x-forwarded-for": `10.7.${ips >> 8}.${ips & 255}` },
  });
  return { status: res.status, tier: res.headers.get("x-user-tier"), body: await res.text() };
};
const version = () => t.tollgate.policy.current().version;
const reloadCall = async () => {
  const res = await fetch(`${t.adminUrl}/admin/policy/reload`, {
    method: "POST",
    headers: { authorization: `Bearer ${t.adminToken}` },
  });
  return { status: res.status, body: (await res.json()) as { problems?: string[]; version?: string } };
};

describe("a policy reload and the provider's tiers", () => {
  it("refuses, through the admin endpoint, a policy without EXTERNAL_DEFAULT_TIER, and provider tokens keep working", async () => {
    expect((await check()).status).toBe(200);
    const before = version();
    writeFileSync(file, without("free"));
    const reload = await reloadCall();
    expect(reload.status).toBe(422);
    expect(reload.body.version).toBe(before);
    expect(reload.body.problems).toEqual([
      `POLICY_FILE ${file}: EXTERNAL_DEFAULT_TIER: "free" is not a tier of the policy (anonymous, pro, enterprise)`,
      `POLICY_FILE ${file}: JWT_TIER_MAP: basic=free names "free", which is not a tier of the policy (anonymous, pro, enterprise)`,
    ]);
    expect(version()).toBe(before);
    const after = await check();
    expect(after.status, after.body).toBe(200);
    expect(after.tier).toBe("free");
  });

  it("refuses it on the file watch and on the signal's reload, logging why", async () => {
    const before = version();
    writeFileSync(file, without("free"));
    // The watch settles 200 ms after the last change.
    for (let waited = 0; waited < 3_000; waited += 50) {
      if (t.logWrites().some((l) => l.includes('"policy_invalid"') && l.includes('"trigger":"file"'))) break;
      await sleep(50);
    }
    const refusals = t.logWrites().filter((l) => l.includes('"policy_invalid"'));
    expect(refusals.some((l) => l.includes('"trigger":"file"') && l.includes("EXTERNAL_DEFAULT_TIER"))).toBe(
      true,
    );
    // What SIGHUP and a worker's reload message call.
    const signal = t.tollgate.reloadPolicy("signal");
    expect(signal.ok).toBe(false);
    expect(version()).toBe(before);
    expect((await check()).status).toBe(200);
  });

  it("refuses a policy without a tier JWT_TIER_MAP maps to, naming the mapping", async () => {
    writeFileSync(file, without("enterprise"));
    const reload = await reloadCall();
    expect(reload.status).toBe(422);
    expect(reload.body.problems).toEqual([
      `POLICY_FILE ${file}: JWT_TIER_MAP: corporate=enterprise names "enterprise", which is not a tier of the policy (anonymous, free, pro)`,
    ]);
    const corporate = await check({ plan: "corporate" });
    expect(corporate.tier).toBe("enterprise");
  });

  it("reloads a policy that keeps those tiers", async () => {
    const before = version();
    writeFileSync(file, without("pro"));
    const reload = await reloadCall();
    expect(reload.status).toBe(200);
    expect(version()).not.toBe(before);
    expect((await check({ plan: "basic" })).tier).toBe("free");
  });
});
