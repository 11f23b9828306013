// Property-based fuzzing of the three listeners: random methods, paths, headers and bodies never get a 5xx.
import { Agent, request } from "node:http";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { demoToken, type InProcess, startInProcess } from "../support/in-process.js";
import { rawRequest } from "../support/raw-http.js";

let tollgate: InProcess;
let validToken = "";
// A fresh connection per request: a connection the server closed after a parse error must not be reused.
const agent = new Agent({ keepAlive: false, maxSockets: 16 });

beforeAll(async () => {
  tollgate = await startInProcess();
  validToken = await demoToken(tollgate.tollgate.auth, "alice");
});

afterAll(async () => {
  await tollgate?.close();
  agent.destroy();
});

type Sent = {
  method: string;
  path: string;
  headers: Record<string, string>;
  body: Buffer | undefined;
};
/** For nginx's auth_request the check sends no body: a denial's JSON travels in X-Authz-Body. */
type Answer = {
  status: number;
  contentType: string | undefined;
  body: string;
  authzBody: string | undefined;
};

function sendOnce(base: string, sent: Sent): Promise<Answer> {
  const url = new URL(base);
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: url.hostname,
        port: url.port,
        method: sent.method,
        path: sent.path,
        headers: sent.headers,
        agent,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("error", reject);
        res.on("end", () =>
          resolve({
            status: res.statusCode ?? 0,
            contentType: res.headers["content-type"],
            body: Buffer.concat(chunks).toString("utf8"),
            authzBody:
              typeof res.headers["x-authz-body"] === "string" ? res.headers["x-authz-body"] : undefined,
          }),
        );
      },
    );
    req.setTimeout(10_000, () => req.destroy(new Error("no answer within 10 s")));
    req.on("error", reject);
    req.end(sent.body);
  });
}

// ---- arbitraries -------------------------------------------------------------------------------

const KNOWN_METHODS = [
  "GET",
  "POST",
  "PUT",
  "PATCH",
  "DELETE",
  "HEAD",
  "OPTIONS",
  "TRACE",
  "PURGE",
  "PROPFIND",
];
const methodArb = fc.oneof(
  { weight: 4, arbitrary: fc.constantFrom(...KNOWN_METHODS) },
  { weight: 1, arbitrary: fc.stringMatching(/^[A-Za-z][A-Za-z0-9!#$%&'*+.^_`|~-]{0,11}$/) },
);

const latin1 = (min: number, max: number) => fc.integer({ min, max }).map((c) => String.fromCharCode(c));
/** What node's client lets into a path: 0x21-0xff, no space. */
const rawSegmentArb = fc.string({ unit: fc.oneof(latin1(0x21, 0x7e), latin1(0xa0, 0xff)), maxLength: 30 });
const segmentArb = fc.oneof(
  fc.string({ unit: "grapheme", maxLength: 20 }).map(encodeURIComponent),
  fc.string({ unit: "binary", maxLength: 10 }).map(encodeURIComponent),
  rawSegmentArb,
  fc.constantFrom(
    "%",
    "%zz",
    "%00",
    "%0d%0a",
    "%2e%2e",
    "%2F",
    "%5C",
    "..",
    ".",
    "",
    "{u:demo-alice}",
    "%E0%A4",
    "*",
  ),
  fc.integer({ min: 100, max: 12_000 }).map((n) => "a".repeat(n)),
);
const queryArb = fc.oneof(
  fc.constant(""),
  fc
    .array(fc.tuple(rawSegmentArb, rawSegmentArb), { maxLength: 4 })
    .map((pairs) => `?${pairs.map(([k, v]) => `${k}=${v}`).join("&")}`),
);

const headerValueArb = fc.string({
  unit: fc.oneof(latin1(0x20, 0x7e), latin1(0x80, 0xff), fc.constant("\t")),
  maxLength: 120,
});
const tokenish = fc.oneof(
  fc.constant(() => validToken),
  fc.string({ maxLength: 300 }).map((s) => () => s.replace(/[^\x21-\x7e]/g, "")),
  fc.constantFrom("a.b.c", "eyJhbGciOiJub25lIn0.e30.", "....", "x".repeat(5000)).map((s) => () => s),
);
/** Headers with meaning somewhere in tollgate, with random (mostly wrong) values. */
const meaningfulHeaderArb = fc.oneof(
  tokenish.map((t) => (): [string, string] => ["authorization", `Bearer ${t()}`]),
  headerValueArb.map((v) => (): [string, string] => ["authorization", v]),
  fc.constant((): [string, string] => ["authorization", `Bearer ${tollgate.adminToken}`]),
  fc
    .constantFrom(
      "application/json",
      "application/json; charset=utf-16",
      "text/plain",
      "application/x-www-form-urlencoded",
      "application/vnd.x+json",
      "multipart/form-data; boundary=x",
    )
    .map((v) => (): [string, string] => ["content-type", v]),
  fc
    .oneof(headerValueArb, fc.constantFrom("gzip", "deflate", "br", "identity"))
    .map((v) => (): [string, string] => ["content-encoding", v]),
  fc
    .tuple(
      fc.constantFrom(
        "x-original-method",
        "x-original-uri",
        "x-forwarded-for",
        "x-tollgate-client-ip",
        "x-device-name",
        "user-agent",
        "accept",
        "cookie",
        "x-request-id",
      ),
      headerValueArb,
    )
    .map(([name, value]) => (): [string, string] => [name, value]),
  fc
    .constantFrom("/", "/api/products", "/auth/login", "/health", "//api//x", "/api/%2e%2e/admin")
    .map((v) => (): [string, string] => ["x-original-uri", v]),
);
const randomHeaderArb = fc
  .tuple(fc.stringMatching(/^[a-z][a-z0-9-]{0,19}$/), headerValueArb)
  .filter(
    ([name]) =>
      ![
        "content-length",
        "transfer-encoding",
        "connection",
        "host",
        "expect",
        "upgrade",
        "te",
        "trailer",
        "keep-alive",
      ].includes(name),
  )
  .map(([name, value]) => (): [string, string] => [name, value]);

const bodyArb = fc.oneof(
  fc.constant(undefined),
  fc.json({ maxDepth: 3 }).map((s) => Buffer.from(s)),
  fc
    .record(
      {
        username: fc.oneof(fc.constantFrom("alice", "bob_pro"), fc.string({ maxLength: 80 })),
        password: fc.string({ maxLength: 40 }),
      },
      { requiredKeys: [] },
    )
    .map((o) => Buffer.from(JSON.stringify(o))),
  fc
    .record(
      {
        tier: fc.oneof(fc.constantFrom("free", "pro", "anonymous"), fc.string()),
        disabled: fc.anything({ maxDepth: 1 }),
      },
      { requiredKeys: [] },
    )
    .map((o) => Buffer.from(JSON.stringify(o) ?? "null")),
  fc.string({ maxLength: 200 }).map((s) => Buffer.from(s)),
  fc.uint8Array({ maxLength: 300 }).map((a) => Buffer.from(a)),
  fc
    .integer({ min: 15_000, max: 40_000 })
    .map((n) => Buffer.from(JSON.stringify({ username: "u".repeat(n) }))),
);

type Generated = {
  method: string;
  prefix: string;
  segments: string[];
  query: string;
  headers: Array<() => [string, string]>;
  body: Buffer | undefined;
};

const requestArb = (prefixes: readonly string[]): fc.Arbitrary<Generated> =>
  fc.record({
    method: methodArb,
    prefix: fc.constantFrom(...prefixes),
    segments: fc.array(segmentArb, { maxLength: 4 }),
    query: queryArb,
    headers: fc.array(fc.oneof(meaningfulHeaderArb, randomHeaderArb), { maxLength: 8 }),
    body: bodyArb,
  });

/** Headers are built late: the admin token and the valid token exist only once the suite started. */
function materialise(generated: Generated, admin: "with" | "without" | "any"): Sent {
  const tail = generated.segments.length > 0 ? `/${generated.segments.join("/")}` : "";
  const headers: Record<string, string> = {};
  for (const make of generated.headers) {
    const [name, value] = make();
    headers[name] = value;
  }
  if (admin === "with") headers.authorization = `Bearer ${tollgate.adminToken}`;
  if (admin === "without" && headers.authorization === `Bearer ${tollgate.adminToken}`)
    delete headers.authorization;
  return {
    method: generated.method,
    path: `${generated.prefix}${tail}${generated.query}`,
    headers,
    body: generated.body,
  };
}

function judge(sent: Sent, answer: Answer): void {
  const what = `${sent.method} ${sent.path.slice(0, 120)} ${JSON.stringify(sent.headers).slice(0, 300)} → ${answer.status} ${answer.body.slice(0, 200)}`;
  expect(answer.status, what).toBeGreaterThanOrEqual(100);
  expect(answer.status, what).toBeLessThan(500);
  if (answer.status >= 400 && sent.method !== "HEAD") {
    expect(answer.contentType, what).toMatch(/^application\/json/);
    const body = answer.authzBody ?? answer.body;
    const parsed = JSON.parse(body) as { error?: unknown; message?: unknown };
    expect(typeof parsed.error, what).toBe("string");
    expect(typeof parsed.message, what).toBe("string");
    expect(body, what).not.toMatch(/\bat \S+ \(|node_modules|\/src\//);
  }
}

const RUNS = 200;

async function fuzz(base: () => string, prefixes: readonly string[], admin: "with" | "without" | "any") {
  await fc.assert(
    fc.asyncProperty(requestArb(prefixes), async (generated) => {
      const sent = materialise(generated, admin);
      judge(sent, await sendOnce(base(), sent));
    }),
    { numRuns: RUNS },
  );
  // Still up, and still right: a valid token is still allowed.
  const health = await sendOnce(base(), { method: "GET", path: "/health", headers: {}, body: undefined });
  expect(health.status).toBe(200);
}

describe("fuzzing", () => {
  it("the check listener: never a 5xx, every error body JSON, still up", async () => {
    await fuzz(
      () => tollgate.checkUrl,
      [
        "/ext_authz",
        "/ext_authz/api/products",
        "/ext_authz/auth/login",
        "/nginx/auth",
        "/nginx/auth?x=1",
        "/",
        "/health",
        "/ext_authzx",
      ],
      "any",
    );
    const allowed = await sendOnce(tollgate.checkUrl, {
      method: "GET",
      path: "/ext_authz/api/orders",
      headers: { authorization: `Bearer ${validToken}` },
      body: undefined,
    });
    expect(allowed.status).toBe(200);
  }, 60_000);

  it("the public API: never a 5xx, every error body JSON, still up", async () => {
    await fuzz(
      () => tollgate.publicUrl,
      [
        "/auth/login",
        "/auth/logout",
        "/auth/logout-all",
        "/auth/sessions",
        "/auth/sessions/x/revoke",
        "/me",
        "/health",
        "/ready",
        "/",
      ],
      "any",
    );
  }, 60_000);

  it("the admin API with the admin token: never a 5xx, every error body JSON, still up", async () => {
    await fuzz(
      () => tollgate.adminUrl,
      ["/admin/users", "/admin/users/demo-bob", "/admin/users/nobody", "/metrics", "/health", "/ready", "/"],
      "with",
    );
  }, 60_000);

  it("the admin API without the admin token: never a 5xx, never anything but 401 under /admin", async () => {
    await fc.assert(
      fc.asyncProperty(requestArb(["/admin/users", "/admin/users/demo-bob", "/admin"]), async (generated) => {
        const sent = materialise(generated, "without");
        const answer = await sendOnce(tollgate.adminUrl, sent);
        judge(sent, answer);
        // Anything that reached the router under /admin met the bearer check first.
        if (answer.status < 400) {
          throw new Error(
            `unauthenticated admin request answered ${answer.status}: ${sent.method} ${sent.path}`,
          );
        }
      }),
      { numRuns: RUNS },
    );
  }, 60_000);

  it("raw requests node's client would refuse (CR/LF, bad framing) get a JSON 4xx or a closed socket, never a 5xx", async () => {
    const lines = fc.oneof(
      fc.constantFrom(
        "GET /ext_authz/a\rb HTTP/1.1",
        "GET /ext_authz/a b HTTP/1.1",
        "GET /nginx/auth HTTP/9.9",
        "G\u0000T / HTTP/1.1",
        "GET http://evil/ext_authz/x HTTP/1.1",
        "GET * HTTP/1.1",
      ),
      fc.string({ unit: latin1(0x00, 0xff), maxLength: 60 }).map((s) => `GET /${s} HTTP/1.1`),
    );
    const extra = fc.oneof(
      fc.constantFrom(
        "X-Original-URI: /a\rb",
        "Content-Length: -1",
        "Content-Length: 5\r\nContent-Length: 6",
        "Transfer-Encoding: chunked\r\nContent-Length: 3",
        "Transfer-Encoding: gzip, chunked",
        " leading-space: x",
        "no-colon-here",
        `Authorization: Bearer ${"x".repeat(70_000)}`,
      ),
      fc.string({ unit: latin1(0x00, 0xff), maxLength: 60 }).map((s) => `X-Fuzz: ${s}`),
    );
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom("check", "public", "admin"),
        lines,
        extra,
        async (target, line, header) => {
          const url =
            target === "check"
              ? tollgate.checkUrl
              : target === "public"
                ? tollgate.publicUrl
                : tollgate.adminUrl;
          const reply = await rawRequest(url, `${line}\r\nHost: x\r\n${header}\r\nConnection: close\r\n\r\n`);
          const what = `${target}: ${JSON.stringify(line)} ${JSON.stringify(header.slice(0, 80))} → ${reply.raw.slice(0, 200)}`;
          expect(reply.status, what).toBeLessThan(500);
          if (reply.status >= 400) expect(() => JSON.parse(reply.body), what).not.toThrow();
        },
      ),
      { numRuns: 150 },
    );
    for (const url of [tollgate.checkUrl, tollgate.publicUrl, tollgate.adminUrl]) {
      expect(
        (await sendOnce(url, { method: "GET", path: "/health", headers: {}, body: undefined })).status,
      ).toBe(200);
    }
  }, 60_000);
});
