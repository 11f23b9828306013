// A reload that drops a tier that stored identities (an API key, a user) still hold: the policy takes
// effect, their checks get 401 `account tier is not configured`, never a 500 or another tier, and the
// log says why, once a minute per tier, naming whose tier it is. An admin's move brings them back.
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DEFAULT_POLICY_YAML } from "../../src/policy/policy.js";
import { type InProcessOnRedis, startInProcess } from "../support/in-process.js";

const dir = mkdtempSync(join(tmpdir(), "tollgate-stored-tiers-"));
const file = join(dir, "policy.yaml");
const withoutPro = DEFAULT_POLICY_YAML.replace(/^ {2}pro: .*\n/m, "");

let t: InProcessOnRedis;
let ips = 0;

beforeAll(async () => {
  writeFileSync(file, DEFAULT_POLICY_YAML);
  t = await startInProcess({ env: { LOG_LEVEL: "info", POLICY_FILE: file } });
});
afterAll(async () => {
  await t?.close();
});

const admin = (method: string, path: string, json?: unknown) =>
  t.admin<Record<string, unknown>>(method, path, {
    token: t.adminToken,
    ...(json === undefined ? {} : { json }),
  });

const check = async (headers: Record<string, string>) => {
  ips += 1;
  const res = await fetch(`${t.checkUrl}/ext_authz/api/products`, {
    headers: { ...headers, "x-forwarded-for": `10.8.${ips >> 8}.${ips & 255}` },
  });
  return { status: res.status, tier: res.headers.get("x-user-tier"), body: await res.text() };
};

const tierLines = () =>
  t
    .logWrites()
    .filter((line) => line.includes('"tier_not_configured"'))
    .map((line) => JSON.parse(line) as Record<string, unknown>);

describe("a reload that drops a tier stored identities hold", () => {
  it("refuses their checks 401 with the reason, logs it once a minute per tier, and an admin's move ends it", async () => {
    const key = (await admin("POST", "/admin/api-keys", { name: "pro client", tier: "pro" })).body as {
      id: string;
      key: string;
    };
    const user = await t.newUser("pro");
    const login = await t.loginOk(user.username, user.password);
    expect((await check({ "x-api-key": key.key })).status).toBe(200);

    writeFileSync(file, withoutPro);
    expect((await admin("POST", "/admin/policy/reload")).status).toBe(200);
    const credentials: Record<string, string>[] = [
      { "x-api-key": key.key },
      { authorization: `Bearer ${login.access_token}` },
    ];
    for (const headers of credentials) {
      for (let i = 0; i < 3; i += 1) {
        const refused = await check(headers);
        expect(refused.status, refused.body).toBe(401);
        expect(JSON.parse(refused.body).message).toBe("account tier is not configured");
      }
    }
    const lines = tierLines();
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({ level: "warn", tier: "pro", subject: `u:key:${key.id}` });
    expect(JSON.stringify(lines)).not.toContain(key.key.slice(20));

    expect((await admin("PUT", `/admin/api-keys/${key.id}/tier`, { tier: "enterprise" })).status).toBe(200);
    const moved = await check({ "x-api-key": key.key });
    expect([moved.status, moved.tier]).toEqual([200, "enterprise"]);
  });
});
