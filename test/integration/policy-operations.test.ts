// Policy operations on a real Redis: the policy in force and its reload, shadow mode, a user's own
// limits, and the dry-run check.
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { DEFAULT_POLICY_YAML } from "../../src/policy/policy.js";
import { demoToken, type InProcess, startInProcess } from "../support/in-process.js";

const dir = mkdtempSync(join(tmpdir(), "tollgate-policy-ops-"));
const file = join(dir, "policy.yaml");
const withFree = (free: string) => DEFAULT_POLICY_YAML.replace(/^ {2}free: .*$/m, `  free: ${free}`);
const BASE = withFree("{ general: 100/1h, search: 20/1h, orders: 10/1h, account: 300/1h }");

let t: InProcess;
let token: string;

beforeAll(async () => {
  writeFileSync(file, BASE);
  t = await startInProcess({ env: { POLICY_FILE: file } });
  token = await demoToken(t.tollgate.auth, "alice");
});
afterAll(async () => {
  await t?.close();
});
beforeEach(async () => {
  writeFileSync(file, BASE);
  t.tollgate.reloadPolicy("admin");
  await admin("DELETE", "/admin/users/demo-alice/limits");
});

type Body = Record<string, unknown>;

/**
 * Writes the policy file and reloads it through the admin API; the new policy must be in force.
 * The file watch may have loaded it first (the reload then says unchanged): the version is what counts.
 */
async function rewrite(content: string): Promise<void> {
  const before = (await admin("GET", "/admin/policy")).body.version;
  writeFileSync(file, content);
  const reloaded = await admin("POST", "/admin/policy/reload");
  expect(reloaded.status).toBe(200);
  expect(reloaded.body.version).not.toBe(before);
}
async function admin(method: string, path: string, body?: unknown): Promise<{ status: number; body: Body }> {
  const res = await fetch(`${t.adminUrl}${path}`, {
    method,
    headers: {
      authorization: `Bearer ${t.adminToken}`,
      ...(body === undefined ? {} : { "content-type": "application/json" }),
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: text === "" ? {} : (JSON.parse(text) as Body) };
}
const check = (path = "/api/products") =>
  t.tollgate.checker({ method: "GET", path, authorization: `Bearer ${token}`, ip: "198.51.100.30" });
const metric = async (pattern: RegExp) => {
  const text = await (await fetch(`${t.adminUrl}/metrics`)).text();
  return text.split("\n").filter((line) => pattern.test(line));
};

describe("the policy in force", () => {
  it("is shown with its source and a version that follows its meaning, not its spelling", async () => {
    const before = await admin("GET", "/admin/policy");
    expect(before.status).toBe(200);
    expect(before.body).toMatchObject({ source: `POLICY_FILE ${file}` });
    expect(before.body.policy).toMatchObject({
      tiers: {
        free: { mode: "enforce", categories: { general: { algorithm: "sliding-log", limits: ["100/1h"] } } },
      },
    });
    // The same policy spelled otherwise: the same version, and nothing changes.
    writeFileSync(file, `${BASE}\n# a comment\n`.replace("general: 100/1h", "general: [100/1h]"));
    const again = await admin("POST", "/admin/policy/reload");
    expect(again.body).toMatchObject({ changed: false, version: before.body.version });
    expect(await metric(/^tollgate_policy_info\{/)).toEqual([
      `tollgate_policy_info{version="${before.body.version}"} 1`,
    ]);
  });

  it("refuses an invalid file with the problems named, keeps the policy in force and counts it", async () => {
    const version = (await admin("GET", "/admin/policy")).body.version;
    writeFileSync(file, withFree("{ general: 100/1h, search: twenty, orders: 10/1h, account: 300/1h }"));
    const refused = await admin("POST", "/admin/policy/reload");
    expect(refused.status).toBe(422);
    expect(refused.body).toMatchObject({ error: "invalid_policy", version });
    expect((refused.body.problems as string[])[0]).toMatch(/tiers\.free\.search: bad limit "twenty"/);
    expect((await admin("GET", "/admin/policy")).body.version).toBe(version);
    expect(await check()).toMatchObject({ kind: "allow", limit: { limit: 100 } });
    expect((await metric(/^tollgate_policy_reloads_total\{result="invalid"\}/))[0]).toMatch(/ [1-9]\d*$/);
    const lines = t.logWrites().filter((l) => l.includes('"event":"policy_invalid"'));
    expect(lines.length).toBeGreaterThan(0);
  });

  it("applies a shrunk limit from the next request, keeping what was counted, and frees cached refusals when it grows", async () => {
    for (let i = 0; i < 2; i += 1) expect((await check()).kind).toBe("allow");
    await rewrite(withFree("{ general: 3/1h, search: 20/1h, orders: 10/1h, account: 300/1h }"));
    expect(await check()).toMatchObject({ kind: "allow", limit: { limit: 3, remaining: 0 } });
    expect(await check()).toMatchObject({ kind: "deny", status: 429 });
    expect(await check()).toMatchObject({ kind: "deny", status: 429 }); // now a cached refusal
    await rewrite(BASE);
    expect(await check()).toMatchObject({ kind: "allow", limit: { limit: 100, remaining: 96 } });
    expect(await metric(/^tollgate_policy_info\{/)).toHaveLength(1);
  });
});

describe("a window's count through changes of the windows around it", () => {
  const searches = async (n: number) => {
    let allowed = 0;
    for (let i = 0; i < n; i += 1) if ((await check("/api/search")).kind === "allow") allowed += 1;
    return allowed;
  };
  const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
  const SPLIT = "{ general: 100/1h, search: [10/1s, 20/1h], orders: 10/1h, account: 300/1h }";

  it("holds 20 an hour when a reload adds a per-second window to a spent hourly one", async () => {
    await admin("DELETE", "/admin/users/demo-alice/limits");
    expect(await searches(20)).toBe(20);
    await rewrite(withFree(SPLIT));
    expect(await searches(10)).toBe(0);
    await sleep(1_100);
    expect(await searches(10)).toBe(0);
    const shown = await admin("GET", "/admin/users/demo-alice/limits");
    const windows = (shown.body.limits as Record<string, { windows: Body[] }>).search?.windows ?? [];
    expect(windows.map((w) => [w.limit, w.used])).toEqual([
      [10, 0],
      [20, 20],
    ]);
  });

  it("holds an override's 15 an hour over the 20 already counted by the tier's two windows", async () => {
    writeFileSync(file, withFree(SPLIT));
    t.tollgate.reloadPolicy("admin");
    await admin("DELETE", "/admin/users/demo-alice/limits");
    expect(await searches(10)).toBe(10);
    await sleep(1_100);
    expect(await searches(10)).toBe(10);
    expect((await admin("PUT", "/admin/users/demo-alice/limits", { search: "15/1h" })).status).toBe(200);
    expect(await searches(20)).toBe(0);
  });
});

describe("shadow mode", () => {
  it("lets an over-limit request through, marked, counted as shadow and logged, without counting it", async () => {
    writeFileSync(
      file,
      withFree("{ mode: shadow, general: 2/1h, search: 20/1h, orders: 10/1h, account: 300/1h }"),
    );
    t.tollgate.reloadPolicy("admin");
    await check();
    await check();
    const over = await check();
    expect(over).toMatchObject({ kind: "allow", limit: { shadow: true, used: 2 } });
    const res = await fetch(`${t.checkUrl}/ext_authz/api/products`, {
      headers: { authorization: `Bearer ${token}` },
    });
    expect(res.status).toBe(200);
    expect(res.headers.get("x-ratelimit-shadow")).toBe("deny");
    expect(res.headers.get("x-ratelimit-remaining")).toBe("0");
    expect(res.headers.get("x-user-id")).toBe("demo-alice");
    expect((await metric(/decision="allow",reason="shadow"/))[0]).toMatch(/ [1-9]\d*$/);
    expect(t.logWrites().some((l) => l.includes('"event":"shadow_denied"'))).toBe(true);
    // Enforced again: the two counted requests fill it, the shadowed ones were not added.
    writeFileSync(file, withFree("{ general: 3/1h, search: 20/1h, orders: 10/1h, account: 300/1h }"));
    t.tollgate.reloadPolicy("admin");
    expect(await check()).toMatchObject({ kind: "allow", limit: { remaining: 0 } });
    expect(await check()).toMatchObject({ kind: "deny", status: 429 });
  });
});

describe("a user's own limits", () => {
  it("replace the tier's for the categories named, from the next request, and show beside them", async () => {
    const set = await admin("PUT", "/admin/users/demo-alice/limits", {
      general: "5/1h",
      search: ["2/1s", "10/1h"],
    });
    expect(set.status).toBe(200);
    expect(set.body.own_limits).toEqual({ general: ["5/1h"], search: ["2/1s", "10/1h"] });
    expect(await check()).toMatchObject({ kind: "allow", limit: { limit: 5, remaining: 4 } });
    const searches = [await check("/api/search"), await check("/api/search"), await check("/api/search")];
    expect(searches.map((d) => d.kind)).toEqual(["allow", "allow", "deny"]);
    expect(searches[2]).toMatchObject({ status: 429, limit: { limit: 2, windowMs: 1_000 } });
    const shown = await admin("GET", "/admin/users/demo-alice/limits");
    expect(shown.body.limits).toMatchObject({
      general: { source: "user", own_limits: ["5/1h"], tier_limits: ["100/1h"], used: 1, remaining: 4 },
      search: { source: "user", own_limits: ["2/1s", "10/1h"], tier_limits: ["20/1h"] },
      orders: { source: "tier", own_limits: null, tier_limits: ["10/1h"] },
    });
    // null follows the tier again for that category only.
    await admin("PUT", "/admin/users/demo-alice/limits", { general: null });
    expect(await check()).toMatchObject({ kind: "allow", limit: { limit: 100 } });
    expect((await admin("GET", "/admin/users/demo-alice/limits")).body.limits).toMatchObject({
      search: { source: "user" },
    });
  });

  it("refuse a bad body with the field named, and DELETE clears them with the windows", async () => {
    const bad = await admin("PUT", "/admin/users/demo-alice/limits", { search: ["2/1s", "ten a minute"] });
    expect(bad.status).toBe(400);
    expect(bad.body.message).toMatch(/^search\[1\]: bad limit "ten a minute"/);
    expect((await admin("PUT", "/admin/users/demo-alice/limits", {})).status).toBe(400);
    const unknown = await admin("PUT", "/admin/users/demo-alice/limits", { reports: "5/1h" });
    expect(unknown.status).toBe(400);
    expect(unknown.body.message).toMatch(/^reports: not a category of tier free/);
    expect((await admin("PUT", "/admin/users/usr_0000000000000000/limits", { general: "5/1h" })).status).toBe(
      404,
    );
    await admin("PUT", "/admin/users/demo-alice/limits", { general: "1/1h" });
    await check();
    expect(await check()).toMatchObject({ status: 429 });
    expect((await admin("DELETE", "/admin/users/demo-alice/limits")).status).toBe(200);
    expect(await check()).toMatchObject({ kind: "allow", limit: { limit: 100, remaining: 99 } });
  });
});

describe("the dry-run check", () => {
  it("answers the decision tollgate would make, counting and renewing nothing", async () => {
    await check();
    const ask = (body: unknown) => admin("POST", "/admin/check", body);
    for (let i = 0; i < 5; i += 1) {
      const dry = await ask({
        method: "get",
        path: "/api/products",
        authorization: `Bearer ${token}`,
        ip: "198.51.100.30",
      });
      expect(dry.status).toBe(200);
      expect(dry.body).toMatchObject({
        status: 200,
        decision: "allow",
        reason: "ok",
        tier: "free",
        category: "general",
        limit: 100,
        remaining: 98,
      });
    }
    expect(await check()).toMatchObject({ limit: { remaining: 98 } });
    expect((await ask({ method: "GET", path: "/api/products" })).body).toMatchObject({
      status: 401,
      reason: "missing",
    });
    expect((await ask({ method: "GET", path: "/api/search\\" })).body).toMatchObject({ status: 400 });
    expect((await ask({ method: "GET", path: "/api/products", ip: "not an ip" })).status).toBe(400);
    expect((await ask({ path: "/api/products" })).status).toBe(400);
  });
});

describe("the dry-run check with IPV6_SUBNET", () => {
  it("keys an IPv6 client by the configured prefix, as real checks do", async () => {
    const wide = await startInProcess({ env: { IPV6_SUBNET: "48" } });
    try {
      // Real checks as Envoy sends them: the client's address in X-Tollgate-Client-Ip.
      const login = async (ip: string) => {
        const res = await fetch(`${wide.checkUrl}/ext_authz/auth/login`, {
          method: "POST",
          headers: { "x-tollgate-client-ip": ip },
        });
        return [res.status, res.headers.get("x-ratelimit-remaining")];
      };
      expect(await login("2001:db8:1:1::1")).toEqual([200, "9"]);
      // Another /64 of the same /48: the same client for this tollgate, so the same window.
      expect(await login("2001:db8:1:2::1")).toEqual([200, "8"]);
      const res = await fetch(`${wide.adminUrl}/admin/check`, {
        method: "POST",
        headers: { authorization: `Bearer ${wide.adminToken}`, "content-type": "application/json" },
        body: JSON.stringify({ method: "POST", path: "/auth/login", ip: "2001:db8:1:3::1" }),
      });
      expect(await res.json()).toMatchObject({ decision: "allow", category: "login", remaining: 7 });
    } finally {
      await wide.close();
    }
  });
});
