// Forged, broken and stale tokens: 401 on the check listener (Envoy and nginx) and the public API.
import { createHmac, createSign, generateKeyPairSync } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import { grpcClients } from "../support/grpc-client.js";
import { closeClient, type Reply, send } from "../support/http-client.mjs";
import { type InProcessOnRedis, startInProcess } from "../support/in-process.js";
import { JWT_SECRET } from "../support/secrets.mjs";

const AUDIENCE = "tollgate-api";
const PASSWORD = "a-long-enough-password";

const b64 = (value: string | Buffer): string => Buffer.from(value).toString("base64url");
const json = (value: unknown): string => b64(JSON.stringify(value));

type Claims = Record<string, unknown>;

/** A JWT built by hand, so every part (header, payload, signature) can be wrong on purpose. */
function hmacToken(alg: "HS256" | "HS384" | "HS512", claims: Claims, secret: string | Buffer): string {
  const body = `${json({ alg, typ: "JWT" })}.${json(claims)}`;
  const digest = { HS256: "sha256", HS384: "sha384", HS512: "sha512" }[alg];
  return `${body}.${createHmac(digest, secret).update(body).digest("base64url")}`;
}

function rsaToken(claims: Claims, privateKey: string): string {
  const body = `${json({ alg: "RS256", typ: "JWT" })}.${json(claims)}`;
  return `${body}.${createSign("RSA-SHA256").update(body).sign(privateKey, "base64url")}`;
}

const unsigned = (alg: string, claims: Claims): string => `${json({ alg, typ: "JWT" })}.${json(claims)}.`;

const nowSeconds = (): number => Math.floor(Date.now() / 1000);

let hs: InProcessOnRedis;
let rs: InProcessOnRedis;
let keyDir: string;
let publicPem: string;
let privatePem: string;
let userId: string;
let username: string;
/** A live session of the user, opened on the HS256 instance. */
let hsSession: { sid: string; token: string };
let rsSession: { sid: string; token: string };

async function createUser(name: string): Promise<string> {
  const res = await send(`${hs.adminUrl}/admin/users`, {
    method: "POST",
    headers: { authorization: `Bearer ${hs.adminToken}` },
    body: { username: name, password: PASSWORD, tier: "free" },
  });
  expect(res.status, res.text).toBe(201);
  return res.json<{ user_id: string }>().user_id;
}

async function loginOn(target: InProcessOnRedis, name: string): Promise<{ sid: string; token: string }> {
  const res = await send(`${target.publicUrl}/auth/login`, {
    method: "POST",
    body: { username: name, password: PASSWORD },
  });
  expect(res.status, res.text).toBe(200);
  const body = res.json<{ access_token: string; session_id: string }>();
  return { sid: body.session_id, token: body.access_token };
}

beforeAll(async () => {
  keyDir = mkdtempSync(join(tmpdir(), "tollgate-keys-"));
  const pair = generateKeyPairSync("rsa", {
    modulusLength: 2048,
    publicKeyEncoding: { type: "spki", format: "pem" },
    privateKeyEncoding: { type: "pkcs8", format: "pem" },
  });
  publicPem = pair.publicKey;
  privatePem = pair.privateKey;
  writeFileSync(join(keyDir, "public.pem"), publicPem);
  writeFileSync(join(keyDir, "private.pem"), privatePem);
  hs = await startInProcess({ env: { JWT_AUDIENCE: AUDIENCE } });
  rs = await startInProcess({
    shareWith: hs,
    env: {
      JWT_ALGORITHMS: "RS256",
      JWT_PRIVATE_KEY_FILE: join(keyDir, "private.pem"),
      JWT_PUBLIC_KEY_FILE: join(keyDir, "public.pem"),
    },
  });
  username = `attacked_${Date.now()}`;
  userId = await createUser(username);
  hsSession = await loginOn(hs, username);
  rsSession = await loginOn(rs, username);
});

afterAll(async () => {
  await Promise.all([rs?.close(), hs?.close()]);
  closeClient();
  rmSync(keyDir, { recursive: true, force: true });
});

let clientCounter = 0;
/** A client address of its own per call, so the anonymous limit of one case never touches another. */
const nextIp = (): string => {
  clientCounter += 1;
  return `198.51.${Math.floor(clientCounter / 250)}.${(clientCounter % 250) + 1}`;
};

type Answers = { envoy: Reply; nginx: Reply; me: Reply };

/** One Authorization header through Envoy's HTTP protocol and nginx's, each from an address of its own. */
function checked(
  target: InProcessOnRedis,
  authorization: string,
  path = "/api/products",
): [Promise<Reply>, Promise<Reply>] {
  return [
    send(`${target.checkUrl}/ext_authz${path}`, {
      headers: { authorization, "x-tollgate-client-ip": nextIp() },
    }),
    send(`${target.checkUrl}/nginx/auth`, {
      headers: {
        authorization,
        "x-original-method": "GET",
        "x-original-uri": path,
        "x-forwarded-for": nextIp(),
      },
    }),
  ];
}

/** The same token through Envoy's protocol, nginx's protocol and the public API. */
async function everywhere(target: InProcessOnRedis, token: string, path = "/api/products"): Promise<Answers> {
  const authorization = `Bearer ${token}`;
  const [envoy, nginx, me] = await Promise.all([
    ...checked(target, authorization, path),
    send(`${target.publicUrl}/me`, { headers: { authorization } }),
  ]);
  return { envoy, nginx, me };
}

function expectUnauthorized(answers: Answers, what: string): void {
  for (const [where, reply] of Object.entries(answers)) {
    const label = `${what} via ${where}: ${reply.status} ${reply.text.slice(0, 200)}`;
    expect(reply.status, label).toBe(401);
    expect(reply.header("content-type"), label).toMatch(/^application\/json/);
    expect(reply.header("www-authenticate"), label).toMatch(
      /^Bearer realm="tollgate", error="invalid_token"/,
    );
    // nginx's auth_request reads no body: tollgate sends the JSON in X-Authz-Body for nginx to send.
    const body = where === "nginx" ? (reply.header("x-authz-body") ?? "") : reply.text;
    expect(JSON.parse(body), label).toMatchObject({ error: "unauthorized" });
    expect(reply.header("x-user-id"), label).toBeUndefined();
  }
  expect(answers.nginx.header("x-authz-status")).toBe("401");
}

function expectAllowed(answers: Answers, what: string): void {
  expect(answers.envoy.status, `${what} via envoy: ${answers.envoy.text}`).toBe(200);
  expect(answers.envoy.header("x-user-id")).toBe(userId);
  expect(answers.nginx.status, `${what} via nginx: ${answers.nginx.text}`).toBe(200);
  expect(answers.nginx.header("x-user-id")).toBe(userId);
  expect(answers.me.status, `${what} via /me: ${answers.me.text}`).toBe(200);
  expect(answers.me.json()).toMatchObject({ user_id: userId, username });
}

/** Claims that the HS256 instance accepts, changed by `extra` (undefined removes a claim). */
function hsClaims(extra: Claims = {}): Claims {
  const claims: Claims = {
    sub: userId,
    sid: hsSession.sid,
    tier: "free",
    iss: "tollgate",
    aud: AUDIENCE,
    iat: nowSeconds(),
    exp: nowSeconds() + 3600,
    ...extra,
  };
  for (const [name, value] of Object.entries(claims)) if (value === undefined) delete claims[name];
  return claims;
}

function rsClaims(extra: Claims = {}): Claims {
  return { ...hsClaims({ aud: undefined }), sid: rsSession.sid, ...extra };
}

const hsValid = (extra: Claims = {}): string => hmacToken("HS256", hsClaims(extra), JWT_SECRET);

describe("tokens the HS256 instance must refuse (JWT_ALGORITHMS=HS256, JWT_AUDIENCE set)", () => {
  it("accepts the hand-built token these cases start from, so each refusal is the attack's doing", async () => {
    expectAllowed(await everywhere(hs, hsValid()), "hand-built HS256");
    expectAllowed(await everywhere(hs, hsSession.token), "issued token");
  });

  const cases: Array<[string, () => string]> = [
    ["alg none with an empty signature", () => unsigned("none", hsClaims())],
    ["alg None (odd case) with an empty signature", () => unsigned("None", hsClaims())],
    [
      "alg none carrying the signature of a valid token",
      () => {
        const valid = hsValid().split(".");
        return `${json({ alg: "none", typ: "JWT" })}.${valid[1]}.${valid[2]}`;
      },
    ],
    [
      "HS512 signed with the right secret (outside the allow-list)",
      () => hmacToken("HS512", hsClaims(), JWT_SECRET),
    ],
    [
      "HS384 signed with the right secret (outside the allow-list)",
      () => hmacToken("HS384", hsClaims(), JWT_SECRET),
    ],
    [
      "HS256 signed with another secret",
      () => hmacToken("HS256", hsClaims(), "another-secret-of-32-bytes-or-more!!"),
    ],
    ["an expired token", () => hsValid({ iat: nowSeconds() - 7200, exp: nowSeconds() - 60 })],
    ["a token without exp", () => hsValid({ exp: undefined })],
    ["nbf ten minutes ahead", () => hsValid({ nbf: nowSeconds() + 600 })],
    ["a wrong issuer", () => hsValid({ iss: "someone-else" })],
    ["no issuer", () => hsValid({ iss: undefined })],
    ["a wrong audience", () => hsValid({ aud: "another-api" })],
    ["no audience", () => hsValid({ aud: undefined })],
    [
      "a payload changed after signing (tier raised)",
      () => {
        const [header, , signature] = hsValid().split(".");
        return `${header}.${json(hsClaims({ tier: "enterprise", sub: "demo-carol" }))}.${signature}`;
      },
    ],
    [
      "a payload changed after signing (one character)",
      () => {
        const [header, payload = "", signature] = hsValid().split(".");
        const flipped = payload.slice(0, -2) + (payload.at(-2) === "A" ? "B" : "A") + payload.slice(-1);
        return `${header}.${flipped}.${signature}`;
      },
    ],
    ["a token cut short by ten characters", () => hsValid().slice(0, -10)],
    ["a token without its signature", () => hsValid().split(".").slice(0, 2).join(".")],
    ["a token with only its header", () => hsValid().split(".")[0] as string],
    ["a header that is not base64url", () => `!!!${hsValid()}`],
    [
      "a payload that is not base64url",
      () => {
        const [header, , signature] = hsValid().split(".");
        return `${header}.%%%$$$***.${signature}`;
      },
    ],
    [
      "a payload that is base64url of something other than JSON",
      () => {
        const header = json({ alg: "HS256", typ: "JWT" });
        const body = `${header}.${b64("not json at all")}`;
        return `${body}.${createHmac("sha256", JWT_SECRET).update(body).digest("base64url")}`;
      },
    ],
    [
      "an alg that is a number",
      () => {
        const body = `${json({ alg: 256, typ: "JWT" })}.${json(hsClaims())}`;
        return `${body}.${createHmac("sha256", JWT_SECRET).update(body).digest("base64url")}`;
      },
    ],
    ["an alg that is a list", () => `${json({ alg: ["HS256"], typ: "JWT" })}.${json(hsClaims())}.sig`],
    ["a header without alg", () => `${json({ typ: "JWT" })}.${json(hsClaims())}.sig`],
    ["a header that is a JSON number", () => `${b64("12345")}.${json(hsClaims())}.sig`],
    ["a payload that is JSON null", () => `${json({ alg: "HS256", typ: "JWT" })}.${b64("null")}.sig`],
    ["a missing sub", () => hsValid({ sub: undefined })],
    ["a missing sid", () => hsValid({ sid: undefined })],
    ["a sub that is a number", () => hsValid({ sub: 12345 })],
    ["a sub that is an object", () => hsValid({ sub: { id: "demo-alice" } })],
    ["a sub with hash-tag characters", () => hsValid({ sub: `${userId}}:x{u:demo-alice` })],
    ["a sid that is an array", () => hsValid({ sid: [hsSession.sid] })],
    ["a session id that was never issued", () => hsValid({ sid: "never-issued-session-id" })],
    ["another user's id with this user's session", () => hsValid({ sub: "demo-alice" })],
    ["a correctly signed token of 20 KB", () => hsValid({ pad: "x".repeat(20 * 1024) })],
    ["a 20 KB string of garbage", () => "g".repeat(20 * 1024)],
    [
      "an RS256 token, validly signed, on an instance that allows HS256 only",
      () => rsaToken(hsClaims(), privatePem),
    ],
  ];

  it.each(cases)("answers 401 to %s", async (name, build) => {
    expectUnauthorized(await everywhere(hs, build()), name);
  });

  it("answers 401 to a non-Bearer scheme and to an empty Bearer", async () => {
    for (const authorization of [`Basic ${b64("alice:secret")}`, "Bearer ", "Bearer", `Token ${hsValid()}`]) {
      const [envoy, nginx, me] = await Promise.all([
        ...checked(hs, authorization),
        send(`${hs.publicUrl}/me`, { headers: { authorization } }),
      ]);
      for (const reply of [envoy, nginx, me]) {
        expect(reply.status, `${authorization}: ${reply.text}`).toBe(401);
        const body = reply === nginx ? (reply.header("x-authz-body") ?? "") : reply.text;
        expect(JSON.parse(body)).toMatchObject({ error: "unauthorized" });
      }
    }
  });

  it("names what it accepts (Envoy HTTP, nginx and gRPC alike): another scheme, or tollgate's malformed", async () => {
    const grpc = grpcClients(hs.grpcUrl);
    try {
      const cases: [string, string][] = [
        [`Basic ${b64("alice:secret")}`, "expected a Bearer token or an API key"],
        [`Token ${hsValid()}`, "expected a Bearer token or an API key"],
        ["ApiKey", "malformed API key"],
        [`ApiKey\t${"k".repeat(40)}`, "malformed API key"],
        ["Bearer", "malformed token"],
        [`Bearer\t${hsValid()}`, "malformed token"],
      ];
      for (const [authorization, message] of cases) {
        const [[envoy, nginx], viaGrpc] = await Promise.all([
          Promise.all(checked(hs, authorization)),
          grpc.check({ path: "/api/products", headers: { authorization }, source: nextIp() }),
        ]);
        const label = JSON.stringify(authorization.slice(0, 12));
        expect(envoy.status, label).toBe(401);
        expect(JSON.parse(envoy.text), label).toEqual({ error: "unauthorized", message });
        expect(envoy.header("www-authenticate"), label).toContain(`error_description="${message}"`);
        expect(JSON.parse(nginx.header("x-authz-body") ?? ""), label).toEqual({
          error: "unauthorized",
          message,
        });
        expect(viaGrpc.status?.message, label).toBe(message);
        expect(JSON.parse(viaGrpc.denied_response?.body ?? ""), label).toEqual({
          error: "unauthorized",
          message,
        });
      }
    } finally {
      grpc.close();
    }
  });
});

describe("a flood of bad tokens", () => {
  it("counts every bad token against the client's anonymous limit, so the 101st meets 429", async () => {
    const ip = "203.0.113.77";
    const notJson = `${json({ alg: "HS256", typ: "JWT" })}.${b64("not json")}.sig`;
    const kinds = [notJson, unsigned("none", hsClaims()), "garbage", hsValid({ exp: nowSeconds() - 60 })];
    const statuses: number[] = [];
    for (let i = 0; i < 101; i += 1) {
      const res = await send(`${hs.checkUrl}/ext_authz/api/products`, {
        headers: { authorization: `Bearer ${kinds[i % kinds.length]}`, "x-tollgate-client-ip": ip },
      });
      statuses.push(res.status);
    }
    expect(statuses.slice(0, 100)).toEqual(Array(100).fill(401));
    expect(statuses[100]).toBe(429);
  });
});

describe("tokens the RS256 instance must refuse (JWT_ALGORITHMS=RS256)", () => {
  it("accepts the hand-built RS256 token these cases start from", async () => {
    expectAllowed(await everywhere(rs, rsaToken(rsClaims(), privatePem)), "hand-built RS256");
    expectAllowed(await everywhere(rs, rsSession.token), "issued RS256 token");
  });

  const cases: Array<[string, () => string]> = [
    [
      "HS256 signed with the RS256 public key as its secret (algorithm confusion)",
      () => hmacToken("HS256", rsClaims(), publicPem),
    ],
    [
      "HS256 signed with the public key without its trailing newline",
      () => hmacToken("HS256", rsClaims(), publicPem.trim()),
    ],
    ["HS256 signed with the instance's JWT_SECRET", () => hmacToken("HS256", rsClaims(), JWT_SECRET)],
    ["alg none", () => unsigned("none", rsClaims())],
    [
      "RS256 signed by another key pair",
      () => {
        const other = generateKeyPairSync("rsa", { modulusLength: 2048 })
          .privateKey.export({ type: "pkcs8", format: "pem" })
          .toString();
        return rsaToken(rsClaims(), other);
      },
    ],
    ["an expired RS256 token", () => rsaToken(rsClaims({ exp: nowSeconds() - 60 }), privatePem)],
    ["an RS256 token with a wrong issuer", () => rsaToken(rsClaims({ iss: "evil" }), privatePem)],
    [
      "an RS256 token with a tampered payload",
      () => {
        const [header, , signature] = rsaToken(rsClaims(), privatePem).split(".");
        return `${header}.${json(rsClaims({ tier: "enterprise" }))}.${signature}`;
      },
    ],
  ];

  it.each(cases)("answers 401 to %s", async (name, build) => {
    expectUnauthorized(await everywhere(rs, build()), name);
  });

  it("does not accept the HS256 instance's valid tokens", async () => {
    expectUnauthorized(await everywhere(rs, hsSession.token), "an HS256 token on the RS256 instance");
  });

  it("accepts an issued RS256 token in its one spelling only, not respelt to the same signature bytes", async () => {
    const [head, payload, signature = ""] = rsSession.token.split(".");
    // 256 signature bytes end in a character of which only the top two bits count.
    const last = signature.at(-1) as string;
    const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    const twin = alphabet[alphabet.indexOf(last) ^ 1] as string;
    const respelt = `${head}.${payload}.${signature.slice(0, -1)}${twin}`;
    expect(Buffer.from(respelt.split(".")[2] as string, "base64url")).toEqual(
      Buffer.from(signature, "base64url"),
    );
    expectUnauthorized(await everywhere(rs, respelt), "an issued RS256 token, its signature respelt");
    expectAllowed(await everywhere(rs, rsSession.token), "the issued RS256 token, as issued");
  });
});

describe("valid tokens whose session or user is no longer good", () => {
  it("answers 401 once the session was revoked by the admin, although the token was verified and cached", async () => {
    const session = await loginOn(hs, username);
    expectAllowed(await everywhere(hs, session.token), "before revocation");
    const revoked = await send(`${hs.adminUrl}/admin/users/${userId}/revoke`, {
      method: "POST",
      headers: { authorization: `Bearer ${hs.adminToken}` },
    });
    expect(revoked.status).toBe(200);
    expectUnauthorized(await everywhere(hs, session.token), "after admin revocation");
    hsSession = await loginOn(hs, username);
    rsSession = await loginOn(rs, username);
  });

  it("answers 401 after logout, on the very next request", async () => {
    const session = await loginOn(hs, username);
    expectAllowed(await everywhere(hs, session.token), "before logout");
    const out = await send(`${hs.publicUrl}/auth/logout`, {
      method: "POST",
      headers: { authorization: `Bearer ${session.token}` },
    });
    expect(out.status).toBe(200);
    expectUnauthorized(await everywhere(hs, session.token), "after logout");
  });

  it("answers 401 once another device revoked the session", async () => {
    const [first, second] = [await loginOn(hs, username), await loginOn(hs, username)];
    expectAllowed(await everywhere(hs, first.token), "before revocation");
    const res = await send(`${hs.publicUrl}/auth/sessions/${first.sid}/revoke`, {
      method: "POST",
      headers: { authorization: `Bearer ${second.token}` },
    });
    expect(res.status, res.text).toBe(200);
    expectUnauthorized(await everywhere(hs, first.token), "after revocation by another device");
  });

  it("answers 401 while the user is disabled, and lets the user back in once enabled", async () => {
    const name = `disabled_${Date.now()}`;
    const id = await createUser(name);
    const session = await loginOn(hs, name);
    const ok = await send(`${hs.checkUrl}/ext_authz/api/products`, {
      headers: { authorization: `Bearer ${session.token}` },
    });
    expect(ok.status).toBe(200);
    const setDisabled = (disabled: boolean) =>
      send(`${hs.adminUrl}/admin/users/${id}/disabled`, {
        method: "PUT",
        headers: { authorization: `Bearer ${hs.adminToken}` },
        body: { disabled },
      });
    expect((await setDisabled(true)).status).toBe(200);
    const answers = await everywhere(hs, session.token);
    for (const reply of Object.values(answers)) {
      expect(reply.status, reply.text).toBe(401);
      const body = reply === answers.nginx ? (reply.header("x-authz-body") ?? "") : reply.text;
      expect(JSON.parse(body)).toMatchObject({ error: "unauthorized" });
    }
    const relogin = await send(`${hs.publicUrl}/auth/login`, {
      method: "POST",
      body: { username: name, password: PASSWORD },
    });
    expect(relogin.status).toBe(401);
    expect((await setDisabled(false)).status).toBe(200);
    expect((await loginOn(hs, name)).token).not.toBe("");
  });
});

describe("the verified-token cache", () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it("does not keep a token alive past its expiry", async () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    vi.setSystemTime(Date.now());
    const token = hsValid({ exp: nowSeconds() + 60 });
    expectAllowed(await everywhere(hs, token), "before expiry");
    expectAllowed(await everywhere(hs, token), "before expiry, from the cache");
    // Past exp and the 5 s clock leeway.
    vi.setSystemTime(Date.now() + 66_000);
    const answers = await everywhere(hs, token);
    expectUnauthorized(answers, "after expiry");
    expect(answers.envoy.json()).toMatchObject({ message: "token expired" });
  });

  it("still accepts a token inside the clock leeway, and refuses it just after", async () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    vi.setSystemTime(Date.now());
    const token = hsValid({ exp: nowSeconds() + 10 });
    expectAllowed(await everywhere(hs, token), "before expiry");
    vi.setSystemTime(Date.now() + 12_000);
    expectAllowed(await everywhere(hs, token), "inside the 5 s leeway");
    vi.setSystemTime(Date.now() + 5_000);
    expectUnauthorized(await everywhere(hs, token), "past the leeway");
  });

  it("holds to JWT_CLOCK_TOLERANCE_SECONDS, from the cache too: 60 s keeps a token 59 s past exp, 0 s none past it", async () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    vi.setSystemTime(Date.now());
    const tolerant = (seconds: string) =>
      startInProcess({
        shareWith: hs,
        env: { JWT_AUDIENCE: AUDIENCE, JWT_CLOCK_TOLERANCE_SECONDS: seconds },
      });
    const [lenient, strict] = await Promise.all([tolerant("60"), tolerant("0")]);
    try {
      const exp = nowSeconds() + 10;
      const token = hsValid({ exp });
      expectAllowed(await everywhere(lenient, token), "before expiry, lenient");
      expectAllowed(await everywhere(strict, token), "before expiry, strict");
      vi.setSystemTime((exp + 1) * 1000);
      expectUnauthorized(await everywhere(strict, token), "1 s past exp, no tolerance, though cached");
      vi.setSystemTime((exp + 59) * 1000);
      expectAllowed(await everywhere(lenient, token), "59 s past exp, from the cache");
      expectAllowed(await everywhere(lenient, hsValid({ exp, iat: exp - 30 })), "59 s past exp, never seen");
      vi.setSystemTime((exp + 61) * 1000);
      const late = await everywhere(lenient, token);
      expectUnauthorized(late, "61 s past exp");
      expect(late.envoy.json()).toMatchObject({ message: "token expired" });
    } finally {
      await Promise.all([lenient.close(), strict.close()]);
    }
  });
});
