// Input an outside client can send the three listeners of a real process: body media types, Expect,
// CONNECT, methods a path does not serve, numbers and repeated query parameters. Each answer is the
// documented success or a 4xx JSON error, and the logs hold no secret.
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { send } from "../support/http-client.mjs";
import { startTollgate, type TollgateProcess } from "../support/processes.mjs";
import { rawRequest } from "../support/raw-http.js";

const PASSWORD = "api-input-password-5131";
let tollgate: TollgateProcess;
let userId = "";
const username = `input_${process.pid}_${Date.now()}`;
/** Every token and key handed out here: none may appear in a log line. */
const issued: string[] = [];

beforeAll(async () => {
  tollgate = await startTollgate({
    REDIS_URL: inject("redisUrl"),
    REDIS_KEY_PREFIX: `api-input-${process.pid}-${Date.now()}:`,
    // POST /json on the check port is served only with a rate limit service configured.
    RLS_CONFIG: fileURLToPath(new URL("../fixtures/rls/e2e/semantics", import.meta.url)),
  });
  const created = await send(`${tollgate.adminUrl}/admin/users`, {
    method: "POST",
    headers: { authorization: `Bearer ${tollgate.adminToken}` },
    body: { username, password: PASSWORD, tier: "free" },
  });
  expect(created.status, created.text).toBe(201);
  userId = created.json<{ user_id: string }>().user_id;
});

afterAll(async () => {
  await tollgate?.stop();
});

/** A login of the test's user with its body labelled `type`. */
async function loginAs(type: string) {
  const reply = await send(`${tollgate.url}/auth/login`, {
    method: "POST",
    headers: { "content-type": type },
    body: JSON.stringify({ username, password: PASSWORD }),
  });
  if (reply.status === 200) issued.push(reply.json<{ access_token: string }>().access_token);
  return reply;
}

describe("body media types", () => {
  it("reads a +json body as JSON, as it reads application/json with any parameters", async () => {
    for (const type of [
      "application/json",
      "APPLICATION/JSON; Charset=UTF-8",
      "application/json;",
      "application/vnd.api+json",
      "application/merge-patch+json; charset=utf-8",
    ]) {
      const reply = await loginAs(type);
      expect([type, reply.status], reply.text).toEqual([type, 200]);
    }
    const tier = await send(`${tollgate.adminUrl}/admin/users/${userId}/tier`, {
      method: "PUT",
      headers: {
        authorization: `Bearer ${tollgate.adminToken}`,
        "content-type": "application/merge-patch+json",
      },
      body: JSON.stringify({ tier: "pro" }),
    });
    expect([tier.status, tier.json().tier]).toEqual([200, "pro"]);
  });

  it("refuses 415 a type that only begins like JSON, rather than calling the body it was sent missing", async () => {
    for (const type of [
      "application/json-seq",
      "application/json/extra",
      "application/json garbage",
      "application/json, text/plain",
      "application/+json",
    ]) {
      const reply = await loginAs(type);
      expect([type, reply.status, reply.json()]).toEqual([
        type,
        415,
        { error: "unsupported_media_type", message: "Send the body as application/json" },
      ]);
    }
  });
});

describe("duplicate keys", () => {
  it("refuses a body that gives one key twice, in any charset, rather than keeping the last", async () => {
    const login = await send(`${tollgate.url}/auth/login`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: `{"username":"${username}","password":"wrong","password":"${PASSWORD}"}`,
    });
    expect([login.status, login.json()]).toEqual([
      400,
      { error: "bad_request", message: 'duplicate key "password": give each key once' },
    ]);
    const tier = await send(`${tollgate.adminUrl}/admin/users/${userId}/tier`, {
      method: "PUT",
      headers: { authorization: `Bearer ${tollgate.adminToken}`, "content-type": "application/json" },
      body: '{"tier":"free","tier":"enterprise"}',
    });
    expect([tier.status, tier.json().message]).toEqual([400, 'duplicate key "tier": give each key once']);
    const utf16 = (text: string) => Buffer.from(text, "utf16le");
    const twice = await send(`${tollgate.url}/auth/login`, {
      method: "POST",
      headers: { "content-type": "application/json; charset=utf-16le" },
      body: utf16(`{"username":"${username}","password":"wrong","\u0070assword":"${PASSWORD}"}`),
    });
    expect([twice.status, twice.json().message]).toEqual([
      400,
      'duplicate key "password": give each key once',
    ]);
    const once = await send(`${tollgate.url}/auth/login`, {
      method: "POST",
      headers: { "content-type": "application/json; charset=utf-16le" },
      body: utf16(JSON.stringify({ username, password: PASSWORD })),
    });
    expect(once.status, once.text).toBe(200);
    issued.push(once.json<{ access_token: string }>().access_token);
    const user = await send(`${tollgate.adminUrl}/admin/users/${userId}`, {
      headers: { authorization: `Bearer ${tollgate.adminToken}` },
    });
    expect(user.json().tier).not.toBe("enterprise");
  });
});

describe("device names and user agents", () => {
  /** A login whose X-Device-Name and User-Agent are these bytes (latin1 text), as a client sends them. */
  async function loginWith(device: string, agent: string): Promise<string> {
    const body = JSON.stringify({ username, password: PASSWORD });
    const reply = await rawRequest(
      tollgate.url,
      `POST /auth/login HTTP/1.1\r\nHost: x\r\nX-Device-Name: ${device}\r\nUser-Agent: ${agent}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`,
    );
    expect(reply.status, reply.raw).toBe(200);
    const { access_token: token, session_id: sid } = JSON.parse(reply.body) as {
      access_token: string;
      session_id: string;
    };
    issued.push(token);
    return sid;
  }
  const utf8Bytes = (text: string) => Buffer.from(text, "utf8").toString("latin1");

  it("lists a UTF-8 device name as sent, without its bidi controls, and keeps latin1 bytes that are not UTF-8", async () => {
    const sent = [
      // iOS names devices with a right single quotation mark, whose UTF-8 bytes hold two C1 codes.
      { device: utf8Bytes("Anna’s iPhone"), agent: utf8Bytes("Mozilla/5.0 (Straße €)") },
      { device: utf8Bytes("\u202eenohp\u2066x\u2028y"), agent: "curl/8" },
      { device: "caf\xe9", agent: utf8Bytes(`${"😀".repeat(300)}`) },
    ];
    const sids = [];
    for (const { device, agent } of sent) sids.push(await loginWith(device, agent));
    const listed = await send(`${tollgate.adminUrl}/admin/users/${userId}/sessions`, {
      headers: { authorization: `Bearer ${tollgate.adminToken}` },
    });
    const { sessions } = listed.json<{
      sessions: { session_id: string; device_name: string; user_agent: string }[];
    }>();
    const of = (sid: string) => sessions.find((s) => s.session_id === sid);
    expect(of(sids[0] as string)).toMatchObject({
      device_name: "Anna’s iPhone",
      user_agent: "Mozilla/5.0 (Straße €)",
    });
    expect(of(sids[1] as string)).toMatchObject({ device_name: "enohpxy", user_agent: "curl/8" });
    // Bounded in whole characters: 256 emoji, none cut in half.
    expect(of(sids[2] as string)).toMatchObject({ device_name: "café", user_agent: "😀".repeat(256) });
  });
});

describe("query strings", () => {
  it("refuses a forged or repeated cursor with 400, naming the field once", async () => {
    const list = (query: string) =>
      send(`${tollgate.adminUrl}/admin/users?${query}`, {
        headers: { authorization: `Bearer ${tollgate.adminToken}` },
      });
    const forged = await list("cursor=../..");
    expect([forged.status, forged.json()]).toEqual([
      400,
      { error: "bad_request", message: "cursor: not a cursor from a previous page" },
    ]);
    const repeated = await list("cursor=a&cursor=b");
    expect([repeated.status, repeated.json().message]).toEqual([
      400,
      "cursor: give this query parameter once",
    ]);
  });

  const admin = (path: string) =>
    send(`${tollgate.adminUrl}${path}`, { headers: { authorization: `Bearer ${tollgate.adminToken}` } });

  it("takes ?limit= only in decimal digits within its range, on both listings", async () => {
    for (const [path, range] of [
      ["/admin/users", "1 to 500"],
      ["/admin/api-keys", "1 to 1000"],
    ] as const) {
      for (const limit of [
        "0x10",
        "1e2",
        "%2B5",
        "-1",
        "010",
        "%205",
        "5%20",
        "5.0",
        "99999999999999999999",
        "0",
        "",
        "Infinity",
      ]) {
        const reply = await admin(`${path}?limit=${limit}`);
        expect([path, limit, reply.status, reply.json()]).toEqual([
          path,
          limit,
          400,
          {
            error: "bad_request",
            message: `limit: expected a whole number from ${range}, in decimal digits only`,
          },
        ]);
      }
      expect((await admin(`${path}?limit=2`)).status).toBe(200);
    }
  });

  it("refuses a repeated or unknown query parameter naming it, and ?username= beside the paging ones", async () => {
    for (const [query, message] of [
      ["limit=1&limit=2", "limit: give this query parameter once"],
      ["usernme=alice", 'unknown query parameter "usernme"'],
      ["username=alice&username=bob", "username: give this query parameter once"],
      [
        "username=alice&limit=5",
        "username: looks one user up, where cursor and limit page the list: send one or the other",
      ],
      [
        "username=alice&cursor=usr_1",
        "username: looks one user up, where cursor and limit page the list: send one or the other",
      ],
    ]) {
      const reply = await admin(`/admin/users?${query}`);
      expect([query, reply.status, reply.json()]).toEqual([query, 400, { error: "bad_request", message }]);
    }
    const keys = await admin("/admin/api-keys?after=a&after=b");
    expect([keys.status, keys.json().message]).toEqual([400, "after: give this query parameter once"]);
    // A repeated name is cut short in the message, as it came.
    const long = await admin(`/admin/users?${"x".repeat(5000)}=1`);
    expect([long.status, long.json().message]).toEqual([400, `unknown query parameter "${"x".repeat(64)}…"`]);
  });
});

describe("limits in bodies", () => {
  const put = (path: string, body: object) =>
    send(`${tollgate.adminUrl}${path}`, {
      method: "PUT",
      headers: { authorization: `Bearer ${tollgate.adminToken}` },
      body,
    });

  it("refuses a limit with spaces, a sign, leading zeros, an exponent or a huge count, on users, keys and subjects", async () => {
    const created = await send(`${tollgate.adminUrl}/admin/api-keys`, {
      method: "POST",
      headers: { authorization: `Bearer ${tollgate.adminToken}` },
      body: { name: "limits", tier: "free" },
    });
    expect(created.status).toBe(201);
    const { id, key } = created.json<{ id: string; key: string }>();
    issued.push(key);
    const paths = [
      `/admin/users/${userId}/limits`,
      `/admin/api-keys/${id}/limits`,
      "/admin/subjects/someone/limits",
    ];
    for (const path of paths) {
      for (const limit of [
        " 10/1h",
        "10/1h ",
        "10 /1h",
        "+10/1h",
        "010/1h",
        "10/01h",
        "1e3/1h",
        "0x10/1h",
        "10.0/1h",
        "99999999999999999999/1h",
      ]) {
        const reply = await put(path, { general: limit });
        expect([path, limit, reply.status], reply.text).toEqual([path, limit, 400]);
        expect(reply.json().message).toBe(
          `general: bad limit ${JSON.stringify(limit)}: expected <count>/<duration> with a count from 1 to 1000000 and a duration from 1s to 7d in s, m, h or d, in decimal digits without sign, space or leading zero, e.g. 100/1h`,
        );
      }
      // The documented forms stay: a unit alone counts one of it (docs/policy.md).
      const ok = await put(path, { general: ["10/h", "5/1s"] });
      expect([path, ok.status], ok.text).toEqual([path, 200]);
    }
    // A bad limit or an unknown category is cut short in the message, however long it came.
    const long = await put(paths[0] as string, { general: `${"1".repeat(5000)}/1h` });
    expect(long.json().message).toMatch(/^general: bad limit "1{39}…: expected/);
    const category = await put(paths[0] as string, { ["c".repeat(5000)]: "10/1h" });
    expect(category.json().message).toMatch(new RegExp(`^${"c".repeat(64)}…: not a category of tier`));
  });

  it("refuses unknown fields beside a tier or a disabled flag, rather than ignoring them", async () => {
    const tier = await put(`/admin/users/${userId}/tier`, { tier: "pro", disabled: true });
    expect([tier.status, tier.json()]).toEqual([
      400,
      { error: "bad_request", message: 'unknown key "disabled"' },
    ]);
    const disabled = await put(`/admin/users/${userId}/disabled`, { disabled: false, tier: "enterprise" });
    expect([disabled.status, disabled.json()]).toEqual([
      400,
      { error: "bad_request", message: 'unknown key "tier"' },
    ]);
    const user = await send(`${tollgate.adminUrl}/admin/users/${userId}`, {
      headers: { authorization: `Bearer ${tollgate.adminToken}` },
    });
    expect(user.json()).toMatchObject({ disabled: false });
    expect(user.json().tier).not.toBe("enterprise");
  });
});

describe("POST /admin/check", () => {
  it("refuses a method that no request line could carry", async () => {
    for (const method of ["GE T", "GET\r\nX: y", "GET:", ""]) {
      const reply = await send(`${tollgate.adminUrl}/admin/check`, {
        method: "POST",
        headers: { authorization: `Bearer ${tollgate.adminToken}` },
        body: { method, path: "/api/products" },
      });
      expect([method, reply.status, reply.json()]).toEqual([
        method,
        400,
        { error: "bad_request", message: "method: an HTTP method such as GET, of at most 16 letters" },
      ]);
    }
  });
});

describe("POST /json's numbers", () => {
  it("refuses 400 a uint32 past 2^32 - 1 or in a lenient string, and a unit that is none", async () => {
    const post = (descriptor: Record<string, unknown>) =>
      send(`${tollgate.checkUrl}/json`, {
        method: "POST",
        body: { domain: "e2e", descriptors: [{ entries: [{ key: "hourly", value: "x" }], ...descriptor }] },
      });
    for (const descriptor of [
      { limit: { requestsPerUnit: 4294967296, unit: "HOUR" } },
      { limit: { requestsPerUnit: "010", unit: "HOUR" } },
      { limit: { requestsPerUnit: 5, unit: 99 } },
      { limit: { requestsPerUnit: 5, unit: 0 } },
      { hitsAddend: "18446744073709551616" },
      { hitsAddend: " 1" },
    ]) {
      const reply = await post(descriptor);
      expect([JSON.stringify(descriptor), reply.status], reply.text).toEqual([
        JSON.stringify(descriptor),
        400,
      ]);
      expect(reply.json().error).toBe("bad_request");
    }
    expect((await post({ hitsAddend: "0" })).status).toBe(200);
  });
});

describe("methods", () => {
  /** One request as raw bytes, so that HEAD and OPTIONS are read exactly as they come back. */
  const request = (url: string, method: string, path: string, headers = "") =>
    rawRequest(url, `${method} ${path} HTTP/1.1\r\nHost: x\r\n${headers}Connection: close\r\n\r\n`);
  const admin = () => `Authorization: Bearer ${tollgate.adminToken}\r\n`;
  const allowOf = (reply: { headers: Array<[string, string]> }) =>
    reply.headers.find(([name]) => name === "allow")?.[1];

  it("answers a served path with a method it does not serve 405, with Allow and a JSON error, on every listener", async () => {
    const cases = [
      { url: tollgate.url, method: "GET", path: "/auth/login", allow: "OPTIONS, POST" },
      { url: tollgate.url, method: "DELETE", path: "/auth/logout", allow: "OPTIONS, POST" },
      { url: tollgate.url, method: "PUT", path: "/auth/sessions/abc/revoke", allow: "OPTIONS, POST" },
      { url: tollgate.url, method: "POST", path: "/me", allow: "GET, HEAD, OPTIONS" },
      { url: tollgate.url, method: "POST", path: "/health", allow: "GET, HEAD, OPTIONS" },
      { url: tollgate.adminUrl, method: "PATCH", path: "/admin/users", allow: "GET, HEAD, OPTIONS, POST" },
      {
        url: tollgate.adminUrl,
        method: "POST",
        path: `/admin/users/${userId}`,
        allow: "DELETE, GET, HEAD, OPTIONS",
      },
      { url: tollgate.adminUrl, method: "GET", path: "/admin/policy/reload", allow: "OPTIONS, POST" },
      { url: tollgate.adminUrl, method: "PUT", path: "/metrics", allow: "GET, HEAD, OPTIONS" },
      { url: tollgate.checkUrl, method: "POST", path: "/health", allow: "GET, HEAD, OPTIONS" },
      { url: tollgate.checkUrl, method: "GET", path: "/json", allow: "OPTIONS, POST" },
    ];
    for (const { url, method, path, allow } of cases) {
      const reply = await request(url, method, path, admin());
      expect([method, path, reply.status, allowOf(reply)], reply.raw).toEqual([method, path, 405, allow]);
      expect(reply.headers.find(([name]) => name === "content-type")?.[1]).toMatch(/^application\/json/);
      expect(JSON.parse(reply.body)).toEqual({
        error: "method_not_allowed",
        message: `${method} is not allowed on ${path} (Allow: ${allow})`,
      });
    }
  });

  it("keeps 404 for a path nothing serves, and 401 before anything under /admin without the token", async () => {
    for (const [url, path] of [
      [tollgate.url, "/auth/nothing"],
      [tollgate.adminUrl, "/admin/nothing"],
      [tollgate.checkUrl, "/nothing"],
    ] as const) {
      const reply = await request(url, "PUT", path, admin());
      expect([path, reply.status], reply.raw).toEqual([path, 404]);
      expect(JSON.parse(reply.body).error).toBe("not_found");
    }
    // However long the path, the message repeats at most 200 characters of it.
    const long = await request(tollgate.url, "GET", `/${"a".repeat(5000)}`);
    const message = JSON.parse(Buffer.from(long.body, "latin1").toString("utf8")).message;
    expect([long.status, message]).toEqual([404, `No route for GET /${"a".repeat(199)}…`]);
    const anonymous = await request(tollgate.adminUrl, "PATCH", "/admin/users");
    expect([anonymous.status, JSON.parse(anonymous.body).error]).toEqual([401, "unauthorized"]);
  });

  it("answers OPTIONS 204 with Allow and no body, and HEAD as GET (405 without a body where GET is not served)", async () => {
    for (const [url, path, allow] of [
      [tollgate.url, "/auth/login", "OPTIONS, POST"],
      [tollgate.adminUrl, "/admin/users", "GET, HEAD, OPTIONS, POST"],
      [tollgate.checkUrl, "/health", "GET, HEAD, OPTIONS"],
      [tollgate.checkUrl, "/json", "OPTIONS, POST"],
    ] as const) {
      const reply = await request(url, "OPTIONS", path, admin());
      expect([path, reply.status, allowOf(reply), reply.body], reply.raw).toEqual([path, 204, allow, ""]);
      expect(reply.headers.map(([name]) => name)).not.toContain("content-length");
    }
    for (const url of [tollgate.url, tollgate.adminUrl, tollgate.checkUrl]) {
      const head = await request(url, "HEAD", "/health");
      expect([head.status, head.body], head.raw).toEqual([200, ""]);
    }
    const head = await request(tollgate.url, "HEAD", "/auth/login");
    expect([head.status, allowOf(head), head.body], head.raw).toEqual([405, "OPTIONS, POST", ""]);
  });
});

describe("requests node answers by itself", () => {
  const listeners = () => [
    { name: "public", url: tollgate.url, path: "/auth/login" },
    { name: "admin", url: tollgate.adminUrl, path: "/admin/users" },
    { name: "check", url: tollgate.checkUrl, path: "/ext_authz/api/products" },
  ];

  it("answers an Expect other than 100-continue with a JSON 417, on every listener", async () => {
    for (const { name, url, path } of listeners()) {
      const reply = await rawRequest(
        url,
        `POST ${path} HTTP/1.1\r\nHost: x\r\nExpect: 200-ok\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}`,
      );
      expect([name, reply.status], reply.raw).toEqual([name, 417]);
      expect(reply.headers).toContainEqual(["content-type", "application/json"]);
      expect(JSON.parse(reply.body)).toEqual({
        error: "bad_request",
        message: "Only Expect: 100-continue is supported",
      });
    }
    // 100-continue itself still works: the interim answer, then the login's.
    const body = JSON.stringify({ username, password: PASSWORD });
    const reply = await rawRequest(
      tollgate.url,
      `POST /auth/login HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`,
    );
    expect(reply.raw).toMatch(/^HTTP\/1\.1 100 Continue\r\n\r\nHTTP\/1\.1 200 OK\r\n/);
    issued.push(/"access_token":"([^"]+)"/.exec(reply.raw)?.[1] ?? "missing");
  });

  it("answers CONNECT with a JSON 400 instead of closing the connection without a word", async () => {
    for (const { name, url } of listeners()) {
      const reply = await rawRequest(
        url,
        "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n",
      );
      expect([name, reply.status], reply.raw).toEqual([name, 400]);
      expect(reply.headers).toContainEqual(["content-type", "application/json"]);
      expect(JSON.parse(reply.body)).toEqual({
        error: "bad_request",
        message: "CONNECT is not served here: tollgate is not a proxy",
      });
    }
    expect(tollgate.alive()).toBe(true);
    expect((await send(`${tollgate.url}/health`)).status).toBe(200);
  });
});

describe("the logs", () => {
  it("carry a request id without the C1 codes and line separators that would break a log line", async () => {
    const body = JSON.stringify({ username, password: "not-the-password" });
    const reply = await rawRequest(
      tollgate.url,
      `POST /auth/login HTTP/1.1\r\nHost: x\r\nX-Request-Id: rid-\x85forged\x9b-\tend\xe2\x80\xa8\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`,
    );
    expect(reply.status).toBe(401);
    await expect
      .poll(() =>
        tollgate
          .output()
          .split("\n")
          .filter((line) => line.includes('"requestId":"rid-')),
      )
      .toHaveLength(1);
    const [line = ""] = tollgate
      .output()
      .split("\n")
      .filter((l) => l.includes('"requestId":"rid-'));
    expect(JSON.parse(line).requestId).toBe("rid-forged-endâ¨");
    // No line break of any kind inside a line: each is one JSON object, however a reader splits.
    for (const part of tollgate.output().split(/\r\n|[\r\n\u0085\u2028\u2029]/)) {
      if (part !== "") expect(() => JSON.parse(part), part).not.toThrow();
    }
  });

  it("hold one JSON object a line and never the password, a token or the admin token", () => {
    const lines = tollgate
      .output()
      .split("\n")
      .filter((line) => line !== "");
    expect(lines.length).toBeGreaterThan(0);
    for (const line of lines) expect(() => JSON.parse(line), line).not.toThrow();
    const secrets = [PASSWORD, tollgate.adminToken, ...issued];
    expect(issued.length).toBeGreaterThan(5);
    for (const secret of secrets) expect(tollgate.output()).not.toContain(secret);
  });
});
