// "__proto__", "constructor" and "prototype" as keys of a JSON body, at any depth, on every endpoint
// that reads one: a 400 naming the field, never a key silently dropped, never a polluted prototype.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { closeClient, type Reply, send } from "../support/http-client.mjs";
import { type InProcess, startInProcess } from "../support/in-process.js";

let tollgate: InProcess;
let aliceId = "";

beforeAll(async () => {
  tollgate = await startInProcess({ env: { LOG_LEVEL: "silent" } });
  const found = await send(`${tollgate.adminUrl}/admin/users?username=alice`, { headers: admin() });
  aliceId = found.json<{ user_id: string }>().user_id;
});
afterAll(async () => {
  await tollgate?.close();
  closeClient();
});

function admin(): Record<string, string> {
  return { authorization: `Bearer ${tollgate.adminToken}` };
}

/** Sends `body` as written: an object literal could not carry "__proto__" as a key. */
const sendJson = (url: string, method: string, body: string, headers: Record<string, string> = {}) =>
  send(url, { method, headers: { ...headers, "content-type": "application/json" }, body });

/** A 400 JSON error whose message names the field and says why. */
function expectReserved(reply: Reply, field: string): void {
  expect(reply.status, reply.text).toBe(400);
  const body = reply.json<{ error: string; message: string }>();
  expect(body.error).toBe("bad_request");
  expect(body.message).toContain(`${field}: reserved key`);
}

const RESERVED = ["__proto__", "constructor", "prototype"];

describe("reserved keys in JSON bodies", () => {
  it("refuses them in a user's own limits, and sets nothing", async () => {
    const url = `${tollgate.adminUrl}/admin/users/${aliceId}/limits`;
    for (const key of RESERVED) {
      expectReserved(await sendJson(url, "PUT", `{"${key}": "5/1h"}`, admin()), key);
      // Beside a good category too: the request is refused whole.
      expectReserved(await sendJson(url, "PUT", `{"general": "7/1h", "${key}": "5/1h"}`, admin()), key);
    }
    const limits = (await send(url, { headers: admin() })).json<{
      limits: Record<string, { source: string }>;
    }>().limits;
    expect(Object.values(limits).every((l) => l.source === "tier")).toBe(true);
  });

  it("refuses them in the admin's dry-run check", async () => {
    const url = `${tollgate.adminUrl}/admin/check`;
    for (const key of RESERVED) {
      const body = `{"method": "GET", "path": "/api/products", "${key}": {"ip": "192.0.2.1"}}`;
      expectReserved(await sendJson(url, "POST", body, admin()), key);
    }
  });

  it("refuses them in the admin's user creation, tier, disabled and password changes", async () => {
    for (const key of RESERVED) {
      const create = `{"username": "reserved-${key.replaceAll("_", "")}", "password": "long enough", "tier": "free", "${key}": {"tier": "enterprise"}}`;
      expectReserved(await sendJson(`${tollgate.adminUrl}/admin/users`, "POST", create, admin()), key);
      const user = `${tollgate.adminUrl}/admin/users/${aliceId}`;
      expectReserved(await sendJson(`${user}/tier`, "PUT", `{"tier": "pro", "${key}": 1}`, admin()), key);
      expectReserved(
        await sendJson(`${user}/disabled`, "PUT", `{"disabled": true, "${key}": 1}`, admin()),
        key,
      );
      expectReserved(
        await sendJson(`${user}/password`, "PUT", `{"password": "a new password", "${key}": 1}`, admin()),
        key,
      );
    }
    // None of them took effect.
    const alice = (
      await send(`${tollgate.adminUrl}/admin/users?username=alice`, { headers: admin() })
    ).json();
    expect(alice).toMatchObject({ tier: "free", disabled: false });
    const found = await send(`${tollgate.adminUrl}/admin/users?username=reserved-proto`, {
      headers: admin(),
    });
    expect(found.status).toBe(404);
  });

  it("refuses them in a login, at any depth, naming the field", async () => {
    const url = `${tollgate.publicUrl}/auth/login`;
    for (const key of RESERVED) {
      expectReserved(
        await sendJson(url, "POST", `{"username": "alice", "password": "secret", "${key}": {"admin": true}}`),
        key,
      );
      expectReserved(
        await sendJson(
          url,
          "POST",
          `{"username": "alice", "password": "secret", "a": {"b": [{"${key}": 1}]}}`,
        ),
        `a.b[0].${key}`,
      );
    }
    // The same login without them works.
    const ok = await sendJson(url, "POST", `{"username": "alice", "password": "secret"}`);
    expect(ok.status).toBe(200);
  });

  it("never pollutes a prototype, and answers a deeply nested body with a 4xx", async () => {
    const polluting = `{"__proto__": {"polluted": "yes"}, "constructor": {"prototype": {"polluted": "yes"}}}`;
    await sendJson(`${tollgate.publicUrl}/auth/login`, "POST", polluting);
    await sendJson(`${tollgate.adminUrl}/admin/users/${aliceId}/limits`, "PUT", polluting, admin());
    await sendJson(`${tollgate.adminUrl}/admin/check`, "POST", polluting, admin());
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    expect(Object.prototype).not.toHaveProperty("polluted");
    // About 16 kB of nesting: read without recursion, so never a stack overflow (a 500).
    const depth = 7_000;
    const deep = `{"a": ${"[".repeat(depth)}${"]".repeat(depth)}}`;
    const reply = await sendJson(`${tollgate.publicUrl}/auth/login`, "POST", deep);
    expect(reply.status).toBeGreaterThanOrEqual(400);
    expect(reply.status).toBeLessThan(500);
  });
});
