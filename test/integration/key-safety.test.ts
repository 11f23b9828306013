// Hostile text in usernames, ids, devices, user agents and addresses: keys, headers and logs stay intact.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { canonicalUsername } from "../../src/auth/usernames.js";
import { closeClient, type Reply, send } from "../support/http-client.mjs";
import { type InProcessOnRedis, startInProcess } from "../support/in-process.js";
import { rawRequest } from "../support/raw-http.js";

const PASSWORD = "key-safety-password";
// biome-ignore lint/suspicious/noControlCharactersInRegex: finding control characters is the point.
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/;
const TEN_KB = "k".repeat(10 * 1024);

let tollgate: InProcessOnRedis;
const replies: Reply[] = [];

/** Every reply passes through here: never a 5xx, always a JSON error body, never a broken header. */
function judged(reply: Reply, what: string): Reply {
  replies.push(reply);
  expect(reply.status, `${what}: ${reply.status} ${reply.text.slice(0, 200)}`).toBeLessThan(500);
  // A denial for nginx carries its JSON in X-Authz-Body (auth_request reads no body).
  const body = reply.headers["x-authz-body"]?.[0] ?? reply.text;
  if (reply.status >= 400) expect(() => JSON.parse(body), `${what}: ${body}`).not.toThrow();
  for (const [name, values] of Object.entries(reply.headers)) {
    for (const value of values) expect(value, `${what}: header ${name}`).not.toMatch(/[\r\n]/);
  }
  return reply;
}

const admin = () => ({ authorization: `Bearer ${tollgate.adminToken}` });

async function createUser(username: string): Promise<Reply> {
  return judged(
    await send(`${tollgate.adminUrl}/admin/users`, {
      method: "POST",
      headers: admin(),
      body: { username, password: PASSWORD, tier: "free" },
    }),
    `create ${JSON.stringify(username.slice(0, 40))}`,
  );
}

async function login(username: string, headers: Record<string, string> = {}): Promise<Reply> {
  return judged(
    await send(`${tollgate.publicUrl}/auth/login`, {
      method: "POST",
      headers,
      body: { username, password: PASSWORD },
    }),
    `login ${JSON.stringify(username.slice(0, 40))}`,
  );
}

beforeAll(async () => {
  tollgate = await startInProcess({ env: { MAX_SESSIONS_PER_USER: "20" } });
});

afterAll(async () => {
  await tollgate?.close();
  closeClient();
});

const HOSTILE_USERNAMES = [
  "brace{open",
  "close}brace",
  "{u:demo-alice}",
  "{u:demo-alice}:user",
  "}{",
  "colon:name:x",
  "with space",
  "ünïcødé-名前-🙂",
  "e\u0301", // e + combining acute: one name with "é" (below), keyed by its canonical form
  "__proto__",
  "constructor",
  "users:exist",
  "a".repeat(64),
];
const REFUSED_USERNAMES = [
  " padded ",
  "\u202eevil-rtl",
  "cr\rname",
  "lf\nname",
  "crlf\r\nSet-Cookie: x=1",
  "nul\u0000name",
  "bell\u0007name",
  "tab\tname",
  "del\u007fname",
  "",
  "a".repeat(65),
  TEN_KB,
];

describe("usernames", () => {
  const ids = new Map<string, string>();

  it("accepts names with braces, colons, spaces and unicode as they are, each its own user", async () => {
    for (const username of HOSTILE_USERNAMES) {
      const res = await createUser(username);
      expect(res.status, JSON.stringify(username)).toBe(201);
      const body = res.json<{ user_id: string; username: string }>();
      expect(body.username).toBe(username);
      expect(body.user_id).toMatch(/^[A-Za-z0-9_-]{1,64}$/);
      ids.set(username, body.user_id);
    }
    expect(new Set(ids.values()).size).toBe(HOSTILE_USERNAMES.length);
    expect(ids.get("{u:demo-alice}")).not.toBe("demo-alice");
  });

  it("logs each of them in as itself, and alice is still alice", async () => {
    for (const username of HOSTILE_USERNAMES) {
      const res = await login(username);
      expect(res.status, JSON.stringify(username)).toBe(200);
      expect(res.json<{ user_id: string }>().user_id).toBe(ids.get(username));
    }
    const alice = await send(`${tollgate.publicUrl}/auth/login`, {
      method: "POST",
      body: { username: "alice", password: "secret" },
    });
    expect(alice.json<{ user_id: string }>().user_id).toBe("demo-alice");
  });

  it("refuses a second user of the same name and names with control characters or 10 KB, cleanly", async () => {
    expect((await createUser("{u:demo-alice}")).status).toBe(409);
    // Canonically one name with "e\u0301" (NFKC composes it), so taken.
    expect((await createUser("\u00e9")).status).toBe(409);
    for (const username of REFUSED_USERNAMES) {
      const res = await createUser(username);
      expect(res.status, JSON.stringify(username.slice(0, 40))).toBe(400);
      expect(res.json()).toMatchObject({ error: "bad_request" });
    }
  });

  it("answers a login with a control-character or 10 KB username 400 or 401, never more", async () => {
    for (const username of REFUSED_USERNAMES) {
      expect([400, 401]).toContain((await login(username)).status);
    }
  });
});

describe("device names, user agents and addresses stored with a session", () => {
  it("keeps them bounded and free of control characters", async () => {
    const username = `devices_${Date.now()}`;
    expect((await createUser(username)).status).toBe(201);
    const variants: Array<Record<string, string>> = [
      { "x-device-name": "{u:demo-alice}:s:x", "user-agent": "ua}{:", "x-forwarded-for": "{ip}:w:x" },
      { "x-device-name": "tabs\tinside\t", "user-agent": "ua\twith\ttabs", "x-forwarded-for": "1.2.3.4\t" },
      { "x-device-name": TEN_KB, "user-agent": TEN_KB, "x-forwarded-for": TEN_KB },
      // Latin-1 bytes, C1 controls (0x85, 0x9b) among them, as node's client may send them.
      {
        "x-device-name": "caf\u00e9\u0085\u009b[31m",
        "user-agent": "\u00ff\u0080agent",
        "x-forwarded-for": "::ffff:1.2.3.4",
      },
      { "x-device-name": "   ", "user-agent": "", "x-forwarded-for": "2001:db8::1%{evil}" },
      { "x-device-name": "ok", "user-agent": "ok", "x-forwarded-for": "1.2.3.4:8080, 300.1.1.1" },
    ];
    for (const headers of variants) expect((await login(username, headers)).status).toBe(200);
    const token = (await login(username)).json<{ access_token: string }>().access_token;
    const listed = judged(
      await send(`${tollgate.publicUrl}/auth/sessions`, { headers: { authorization: `Bearer ${token}` } }),
      "sessions",
    ).json<{
      sessions: Array<{ device_name: string; user_agent: string; ip: string; session_id: string }>;
    }>();
    expect(listed.sessions.length).toBeGreaterThanOrEqual(5);
    for (const session of listed.sessions) {
      expect(session.device_name.length).toBeLessThanOrEqual(100);
      expect(session.user_agent.length).toBeLessThanOrEqual(256);
      expect(session.device_name).not.toMatch(CONTROL);
      expect(session.user_agent).not.toMatch(CONTROL);
      expect(session.ip).toMatch(/^(unknown|[0-9a-f.:/]+)$/);
      expect(session.session_id).toMatch(/^[A-Za-z0-9_-]{1,64}$/);
    }
    const devices = listed.sessions.map((s) => s.device_name);
    expect(devices).toContain("{u:demo-alice}:s:x");
    expect(devices).toContain("unknown");
    expect(devices).toContain("k".repeat(100));
  });

  it("answers raw requests with CR, LF or control bytes in header values 400 JSON, or stores them cleaned", async () => {
    const username = `raw_${Date.now()}`;
    expect((await createUser(username)).status).toBe(201);
    const body = JSON.stringify({ username, password: PASSWORD });
    const attempts = [
      "X-Device-Name: evil\rInjected: yes",
      "X-Device-Name: evil\nInjected: yes",
      "X-Device-Name: a\u0001b\u001bc",
      "User-Agent: ua\u0000nul",
      "X-Device-Name: folded\r\n continued",
      "X-Forwarded-For: 1.2.3.4\r\nX-Injected: 1",
      "X-Device-Name: utf8-\u00e2\u0080\u00a8-line-separator",
      `X-Device-Name: ${Buffer.from("名前🙂", "utf8").toString("latin1")}`,
    ];
    for (const line of attempts) {
      const reply = await rawRequest(
        tollgate.publicUrl,
        `POST /auth/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n${line}\r\nConnection: close\r\n\r\n${body}`,
      );
      const what = JSON.stringify(line);
      expect(reply.status, `${what}: ${reply.raw.slice(0, 300)}`).toBeGreaterThanOrEqual(200);
      expect(reply.status, what).toBeLessThan(500);
      expect(reply.headers.map(([name]) => name)).not.toContain("injected");
      expect(reply.headers.map(([name]) => name)).not.toContain("x-injected");
      if (reply.status >= 400) expect(() => JSON.parse(reply.body), `${what}: ${reply.raw}`).not.toThrow();
    }
    const token = (await login(username)).json<{ access_token: string }>().access_token;
    const listed = (
      await send(`${tollgate.publicUrl}/auth/sessions`, { headers: { authorization: `Bearer ${token}` } })
    ).json<{ sessions: Array<{ device_name: string; user_agent: string; ip: string }> }>();
    for (const session of listed.sessions) {
      expect(session.device_name).not.toMatch(CONTROL);
      expect(session.user_agent).not.toMatch(CONTROL);
      expect(session.device_name).not.toContain("Injected");
      expect(session.ip).toMatch(/^(unknown|[0-9a-f.:/]+)$/);
    }
  });
});

describe("ids in paths", () => {
  const hostileIds = [
    "{u:demo-alice}",
    "demo-alice}:x",
    "demo-alice:sessions",
    "%7Bu%3Ademo-alice%7D",
    "..%2Fdemo-alice",
    "%0d%0aSet-Cookie:%20x=1",
    "%00",
    "%E2%80%AE",
    "%F0%9F%99%82",
    "demo-alice%20",
    "a".repeat(10 * 1024),
  ];

  it("answers hostile user ids on the admin API 404 (or 400), never touching another user", async () => {
    for (const id of hostileIds) {
      for (const [method, path, body] of [
        ["GET", "sessions", undefined],
        ["POST", "revoke", undefined],
        ["PUT", "tier", { tier: "enterprise" }],
        ["PUT", "disabled", { disabled: true }],
        ["GET", "limits", undefined],
        ["DELETE", "limits", undefined],
      ] as const) {
        const res = judged(
          await send(`${tollgate.adminUrl}/admin/users/${id}/${path}`, {
            method,
            headers: admin(),
            ...(body === undefined ? {} : { body }),
          }),
          `${method} ${id.slice(0, 40)}/${path}`,
        );
        expect([400, 404], `${method} ${id.slice(0, 40)}/${path}`).toContain(res.status);
        expect(res.headers["set-cookie"]).toBeUndefined();
      }
    }
    const alice = (await tollgate.store.users.get("demo-alice")) as { tier: string; disabled: boolean };
    expect(alice).toMatchObject({ tier: "free", disabled: false });
  });

  it("answers hostile session ids on the public API 404 (or 400)", async () => {
    const token = (
      await send(`${tollgate.publicUrl}/auth/login`, {
        method: "POST",
        body: { username: "bob_pro", password: "secret" },
      })
    ).json<{ access_token: string }>().access_token;
    for (const sid of hostileIds) {
      const res = judged(
        await send(`${tollgate.publicUrl}/auth/sessions/${sid}/revoke`, {
          method: "POST",
          headers: { authorization: `Bearer ${token}` },
        }),
        `revoke ${sid.slice(0, 40)}`,
      );
      expect([400, 404]).toContain(res.status);
    }
  });

  it("answers hostile paths and addresses on the check listener without a 5xx", async () => {
    const paths = [
      "/api/%0d%0ax",
      "/api/{u:demo-alice}",
      "/%F0%9F%99%82",
      `/${"p".repeat(8000)}`,
      "/api/..%2F..%2Fadmin",
    ];
    const addresses = ["{ip:1.2.3.4}", "1.2.3.4}:w:x", "::ffff:1.2.3.4", "2001:db8::{x}", "1.2.3.4 ", TEN_KB];
    for (const path of paths) {
      for (const address of addresses) {
        judged(
          await send(`${tollgate.checkUrl}/ext_authz${path}`, {
            headers: { "x-tollgate-client-ip": address },
          }),
          `envoy ${path.slice(0, 40)} ${address.slice(0, 40)}`,
        );
        judged(
          await send(`${tollgate.checkUrl}/nginx/auth`, {
            headers: { "x-original-method": "GET", "x-original-uri": path, "x-forwarded-for": address },
          }),
          `nginx ${path.slice(0, 40)} ${address.slice(0, 40)}`,
        );
      }
    }
  });
});

describe("what all of the above left behind", () => {
  it("created only keys of the expected shapes, each with one intact hash tag", async () => {
    const keys: string[] = [];
    let cursor = "0";
    do {
      const [next, batch] = await tollgate.redis.scan(cursor, "MATCH", `${tollgate.prefix}*`, "COUNT", 1000);
      cursor = next;
      keys.push(...batch);
    } while (cursor !== "0");
    expect(keys.length).toBeGreaterThan(20);
    const prefix = tollgate.prefix.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
    const shape = new RegExp(
      `^${prefix}(users:exist|\\{users\\}:ids|\\{invalidations\\}:peers(:count)?|\\{u:[A-Za-z0-9_-]{1,64}\\}:(user|sessions|s:[A-Za-z0-9_-]{1,64}|l:[a-z0-9_-]{1,32})|\\{ip:(unknown|[0-9a-f.:/]+)\\}:(r|l:[a-z0-9_-]{1,32})|\\{n:[0-9a-f]+\\}:(uid|r|l:login_failed))$`,
    );
    for (const key of keys) {
      expect(key, key).toMatch(shape);
      const tail = key.slice(tollgate.prefix.length);
      if (tail !== "users:exist") {
        expect(tail.indexOf("{"), key).toBe(0);
        expect(tail.split("{").length, key).toBe(2);
        expect(tail.split("}").length, key).toBe(2);
      }
    }
    // Each hostile username got its own username key: its canonical form, hex-encoded.
    for (const username of HOSTILE_USERNAMES) {
      const hex = Buffer.from(canonicalUsername(username), "utf8").toString("hex");
      expect(keys).toContain(`${tollgate.prefix}{n:${hex}}:uid`);
    }
  });

  it("never set a header with CR or LF, and every error body was JSON", () => {
    expect(replies.length).toBeGreaterThan(100);
    expect(replies.every((r) => r.status < 500)).toBe(true);
  });

  it("wrote every log line as exactly one JSON object", () => {
    const writes = tollgate.logWrites();
    expect(writes.length).toBeGreaterThan(10);
    for (const write of writes) {
      expect(write.endsWith("\n"), write).toBe(true);
      expect(write.slice(0, -1), write).not.toMatch(/[\r\n\u2028\u2029]/);
      const parsed: unknown = JSON.parse(write);
      expect(typeof parsed === "object" && parsed !== null && !Array.isArray(parsed)).toBe(true);
    }
    expect(writes.join("")).not.toContain("Injected: yes");
  });
});
