// The errors nginx answers itself, through a real nginx: each in tollgate's JSON shape, never nginx's
// HTML page, while tollgate's, the upstream's and tollgate's public API's own answers pass unchanged.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Server, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DEFAULT_POLICY_YAML } from "../../src/policy/policy.js";
import { login } from "../support/http-client.mjs";
import { freePort } from "../support/local.mjs";
import { type Nginx, ROOT, startNginx } from "../support/processes.mjs";
import { type RawReply, rawRequest } from "../support/raw-http.js";
import { type RecordingServer, recordingServer } from "../support/recording-server.js";
import { type Stack, startStack } from "../support/stack.js";

const H = "Host: tollgate.test\r\nConnection: close\r\n";
/** One byte over nginx's default client_max_body_size (1 MiB). */
const TOO_BIG = 1024 * 1024 + 1;

const header = (reply: RawReply, name: string): string | undefined =>
  reply.headers.find(([n]) => n === name)?.[1];

/** nginx's own error in tollgate's shape: its status, a JSON content type and `{error, message}`. */
function expectJsonError(reply: RawReply, status: number, error: string): void {
  const seen = reply.raw.slice(0, 400);
  expect(reply.status, seen).toBe(status);
  expect(header(reply, "content-type"), seen).toBe("application/json");
  expect(JSON.parse(reply.body), seen).toEqual({ error, message: expect.stringMatching(/\S/) });
}

/** A chunked request whose body is `chunks` as sent, after the headers given. */
const chunked = (path: string, headers: string, chunks: string) =>
  `POST ${path} HTTP/1.1\r\n${H}${headers}Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n${chunks}`;

describe("nginx's own errors in front of tollgate and the upstream", () => {
  let stack: Stack;
  let nginx: Nginx;
  let auth: string;

  beforeAll(async () => {
    stack = await startStack({ policy: DEFAULT_POLICY_YAML });
    nginx = stack.nginx;
    auth = `Authorization: Bearer ${(await login(stack.tollgate.url, "ent_carol")).access_token}\r\n`;
  });

  afterAll(() => stack?.stop());

  // What nginx refuses while it reads the request, before it picks a location, and what it refuses
  // in a location before the check runs.
  it.each([
    ["a request line it cannot parse", "GARBAGE\r\n\r\n", 400, "bad_request"],
    [
      "a header line without a colon",
      `GET /api/products HTTP/1.1\r\n${H}Bad header line\r\n\r\n`,
      400,
      "bad_request",
    ],
    [
      "two Host headers",
      `GET /api/products HTTP/1.1\r\nHost: a\r\nHost: b\r\nConnection: close\r\n\r\n`,
      400,
      "bad_request",
    ],
    [
      "Content-Length beside Transfer-Encoding",
      `POST /api/orders HTTP/1.1\r\n${H}Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n`,
      400,
      "bad_request",
    ],
    // nginx's 494, which it sends as 400.
    [
      "headers over 60 KiB",
      `GET /api/products HTTP/1.1\r\n${H}X-Big: ${"a".repeat(70_000)}\r\n\r\n`,
      400,
      "bad_request",
    ],
    ["TRACE", `TRACE /api/products HTTP/1.1\r\n${H}\r\n`, 405, "method_not_allowed"],
    ["CONNECT", `CONNECT /api/products HTTP/1.1\r\n${H}\r\n`, 405, "method_not_allowed"],
    [
      "a request line over 60 KiB",
      `GET /api/search?q=${"a".repeat(70_000)} HTTP/1.1\r\n${H}\r\n`,
      414,
      "uri_too_long",
    ],
    [
      "Transfer-Encoding: gzip",
      `POST /api/orders HTTP/1.1\r\n${H}Transfer-Encoding: gzip\r\n\r\n`,
      501,
      "not_implemented",
    ],
    [
      "HTTP/2.0 in a request line",
      `GET /api/products HTTP/2.0\r\n${H}\r\n`,
      505,
      "http_version_not_supported",
    ],
    [
      "a request for the check's internal location",
      `GET /_tollgate_check HTTP/1.1\r\n${H}\r\n`,
      404,
      "not_found",
    ],
    [
      "a request for the error page's location",
      `GET /_tollgate_error HTTP/1.1\r\n${H}\r\n`,
      404,
      "not_found",
    ],
    ["a path no location serves", `GET /nothing HTTP/1.1\r\n${H}\r\n`, 404, "not_found"],
  ])("answers %s in JSON with nginx's status", async (_, request, status, error) => {
    expectJsonError(await rawRequest(nginx.url, request), status, error);
  });

  // client_max_body_size applies once the location is known: checked, unchecked and route-less ones.
  it.each(["/api/orders", "/auth/login", "/health", "/nothing"])(
    "answers a body over 1 MiB to %s with 413 JSON",
    async (path) => {
      const reply = await rawRequest(
        nginx.url,
        `POST ${path} HTTP/1.1\r\n${H}${auth}Content-Type: application/json\r\nContent-Length: ${TOO_BIG}\r\n\r\n${"a".repeat(TOO_BIG)}`,
      );
      expectJsonError(reply, 413, "payload_too_large");
    },
  );

  it("answers a chunked body that breaks or outgrows 1 MiB after the check with JSON and the check's limit headers", async () => {
    const broken = await rawRequest(nginx.url, chunked("/api/orders", auth, "zz\r\n\r\n"));
    expectJsonError(broken, 400, "bad_request");
    expect(header(broken, "x-ratelimit-limit")).toBe("1000");
    const big = await rawRequest(
      nginx.url,
      chunked("/api/orders", auth, `${TOO_BIG.toString(16)}\r\n${"a".repeat(TOO_BIG)}\r\n0\r\n\r\n`),
    );
    expectJsonError(big, 413, "payload_too_large");
    expect(header(big, "x-ratelimit-resource")).toBe("orders");
  });

  it("answers a broken chunked body with 400 JSON when the check denied the request", async () => {
    // The denial's answer reads the body to discard it: nginx fails there, in the denial's location.
    const reply = await rawRequest(nginx.url, chunked("/api/orders", "", "zz\r\n\r\n"));
    expectJsonError(reply, 400, "bad_request");
  });

  it("passes tollgate's, its public API's and the upstream's own answers through unchanged", async () => {
    const denied = await rawRequest(nginx.url, `GET /api/products HTTP/1.1\r\n${H}\r\n`);
    expect(denied.status).toBe(401);
    expect(header(denied, "www-authenticate")).toBe('Bearer realm="tollgate"');
    expect(JSON.parse(denied.body)).toEqual({ error: "unauthorized", message: "Authentication required" });
    const search = await rawRequest(nginx.url, `GET /api/search HTTP/1.1\r\n${H}${auth}\r\n`);
    expect(search.status).toBe(400);
    expect(JSON.parse(search.body).message).toMatch(/^q /);
    expect(header(search, "x-ratelimit-resource")).toBe("search");
    const malformed = await rawRequest(
      nginx.url,
      `POST /auth/login HTTP/1.1\r\n${H}Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}`,
    );
    expect(malformed.status).toBe(400);
    expect(JSON.parse(malformed.body).message).toMatch(/username and password/);
    expect(nginx.errorLog()).not.toMatch(/auth request unexpected status/);
  });
});

describe("nginx's own errors when tollgate or the upstream is down, slow or odd", () => {
  let check: RecordingServer;
  let ownErrors: RecordingServer;
  let silent: { port: number; close(): Promise<void> };
  let unreachable: Nginx;
  let allowing: Nginx;
  let slow: Nginx;
  let templateDir: string;

  beforeAll(async () => {
    // Allows every request with a limit header, but answers a target under /api/odd with a status
    // auth_request does not take.
    check = await recordingServer((req) =>
      String(req.headers["x-original-uri"]).startsWith("/api/odd")
        ? { status: 500, body: "" }
        : { status: 200, headers: { "x-ratelimit-limit": "7" } },
    );
    // tollgate's public API answering an error of its own, with a header nginx must keep.
    ownErrors = await recordingServer(() => ({
      status: 502,
      headers: { "content-type": "application/json", "x-own": "yes" },
      body: '{"error":"its_own","message":"From behind nginx"}',
    }));
    silent = await silentServer();
    const dead = await freePort();
    // A copy of the template whose waits are short: a test cannot wait nginx's 60 s.
    const original = readFileSync(join(ROOT, "nginx", "nginx.conf.template"), "utf8");
    const shortWaits = original.replace(
      "server_tokens off;",
      "server_tokens off;\n  proxy_read_timeout 1s;\n  client_header_timeout 1s;\n  client_body_timeout 1s;",
    );
    expect(shortWaits).not.toBe(original);
    templateDir = mkdtempSync(join(tmpdir(), "tollgate-nginx-template-"));
    writeFileSync(join(templateDir, "nginx.conf.template"), shortWaits);
    [unreachable, allowing, slow] = await Promise.all([
      startNginx({ checkPort: dead, publicPort: dead, upstreamPort: dead }),
      startNginx({ checkPort: check.port, publicPort: ownErrors.port, upstreamPort: dead }),
      startNginx({
        checkPort: check.port,
        publicPort: dead,
        upstreamPort: silent.port,
        template: join(templateDir, "nginx.conf.template"),
      }),
    ]);
  });

  afterAll(async () => {
    await Promise.all([unreachable?.stop(), allowing?.stop(), slow?.stop()]);
    await Promise.all([check?.close(), ownErrors?.close(), silent?.close()]);
    if (templateDir !== undefined) rmSync(templateDir, { recursive: true, force: true });
  });

  it("answers 503 unavailable with Retry-After when tollgate's check cannot be reached or answers oddly", async () => {
    const down = await rawRequest(unreachable.url, `GET /api/products HTTP/1.1\r\n${H}\r\n`);
    expect(down.status).toBe(503);
    expect(header(down, "content-type")).toBe("application/json");
    expect(header(down, "retry-after")).toBe("1");
    expect(JSON.parse(down.body)).toEqual({
      error: "unavailable",
      message: "The authorization service is unavailable",
    });
    const odd = await rawRequest(allowing.url, `GET /api/odd HTTP/1.1\r\n${H}\r\n`);
    expect(odd.status).toBe(503);
    expect(JSON.parse(odd.body)).toMatchObject({ error: "unavailable" });
    expect(allowing.errorLog()).toMatch(/auth request unexpected status: 500/);
  });

  it("answers 502 JSON when the upstream or tollgate's public API cannot be reached", async () => {
    const app = await rawRequest(allowing.url, `GET /api/products HTTP/1.1\r\n${H}\r\n`);
    expectJsonError(app, 502, "bad_gateway");
    // The check ran and allowed: its limit headers stay on the answer.
    expect(header(app, "x-ratelimit-limit")).toBe("7");
    for (const path of ["/health", "/ready", "/auth/login"]) {
      expectJsonError(await rawRequest(slow.url, `GET ${path} HTTP/1.1\r\n${H}\r\n`), 502, "bad_gateway");
    }
  });

  it("answers 504 JSON when the upstream does not answer in time", async () => {
    const reply = await rawRequest(slow.url, `GET /api/products HTTP/1.1\r\n${H}\r\n`);
    expectJsonError(reply, 504, "gateway_timeout");
    expect(header(reply, "x-ratelimit-limit")).toBe("7");
  });

  it("passes an error of the service behind it through unchanged, its headers included", async () => {
    const reply = await rawRequest(allowing.url, `GET /auth/sessions HTTP/1.1\r\n${H}\r\n`);
    expect(reply.status).toBe(502);
    expect(header(reply, "x-own")).toBe("yes");
    expect(JSON.parse(reply.body)).toEqual({ error: "its_own", message: "From behind nginx" });
  });

  // nginx logs a 408 for a client that stalls but sends it nothing: no page to replace.
  it("closes a connection whose headers or body stall, without an answer", async () => {
    const headers = await rawRequest(slow.url, `GET /api/products HTTP/1.1\r\nHost: tollgate.test\r\n`);
    expect(headers.raw).toBe("");
    const body = await rawRequest(
      slow.url,
      `POST /api/orders HTTP/1.1\r\n${H}Content-Type: application/json\r\nContent-Length: 20\r\n\r\n{}`,
    );
    expect(body.raw).toBe("");
  });
});

/** A TCP server that takes connections and never answers: an upstream that hangs. */
async function silentServer(): Promise<{ port: number; close(): Promise<void> }> {
  const sockets = new Set<Socket>();
  const server: Server = createServer((socket) => {
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  const port = typeof address === "object" && address !== null ? address.port : 0;
  return {
    port,
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}
