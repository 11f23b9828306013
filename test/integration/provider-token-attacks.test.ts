// Provider tokens an attacker shapes, and keys a JWKS should never have given: a signature
// re-encoded, a header naming keys of its own, RSA keys too weak to trust, a private key published.
// Against the tests' own identity provider (node:http, keys of node:crypto) and a tollgate on Redis.
import {
  createHash,
  createPrivateKey,
  createPublicKey,
  generateKeyPairSync,
  sign,
  verify,
} from "node:crypto";
import { readFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type InProcessOnRedis, startInProcess } from "../support/in-process.js";
import {
  type JwksServer,
  makeKey,
  signToken,
  startJwksServer,
  type TestKey,
} from "../support/jwks-server.js";
import { selfSignedCert } from "../support/self-signed.js";

const AUDIENCE = "api://attacks";
const b64 = (value: unknown): string => Buffer.from(JSON.stringify(value)).toString("base64url");
const now = () => Math.floor(Date.now() / 1000);
const MALFORMED = { status: 401, message: "malformed token" };

let idp: JwksServer;
let t: InProcessOnRedis;
let good: TestKey;
/** Requests the attacker's own key server was sent (a `jku`/`x5u` tollgate must never follow). */
let attackerRequests = 0;
let attacker: Server;
let attackerUrl: string;

/** An RSA key of `bits`, published in the JWKS as any other. */
const rsaKey = (kid: string, bits: number): TestKey => {
  const pair = generateKeyPairSync("rsa", { modulusLength: bits });
  return { kid, alg: "RS256", privateKey: pair.privateKey, publicKey: pair.publicKey };
};
const weak = rsaKey("weak-1024", 1024);
/** Signs tokens, but published with private members (`d`, `p`, `q`…): anyone can sign with it. */
const leaked = makeKey("leaked");
/** Published with key_ops that do not include verify. */
const encryptOnly = makeKey("encrypt-only");
/** The good key's modulus with e=1: any "signature" equal to the padded hash verifies. */
const E_ONE = "e-one";
/** The good key's modulus with an odd e of 2048 bits: each verification with it would cost milliseconds. */
const E_HUGE = "e-huge";
/** Published with `use: "enc"`: Keycloak's encryption keys are so. */
const encUse = makeKey("enc-use");
/** An RSA key published for PS256 only: a token saying RS256 must not be verified with it. */
const psOnly = makeKey("ps-only");
/** A P-384 key, published without an alg and again labelled ES256: it verifies no ES256 token. */
const p384 = makeKey("p384", "ES384");
/** Two different RSA keys under one kid: each verifies its own tokens. */
const [twinA, twinB] = [makeKey("twin"), makeKey("twin")];

beforeAll(async () => {
  good = makeKey("good");
  idp = await startJwksServer([good, weak, twinA, twinB]);
  const publicJwk = (key: TestKey) => key.publicKey.export({ format: "jwk" }) as object;
  idp.rawKeys = [
    { ...publicJwk(encUse), kid: encUse.kid, alg: "RS256", use: "enc" },
    { ...publicJwk(psOnly), kid: psOnly.kid, alg: "PS256", use: "sig" },
    { ...publicJwk(p384), kid: p384.kid, use: "sig" },
    { ...publicJwk(p384), kid: "p384-as-es256", alg: "ES256", use: "sig" },
    { ...(leaked.privateKey.export({ format: "jwk" }) as object), kid: leaked.kid, alg: "RS256", use: "sig" },
    {
      ...(encryptOnly.publicKey.export({ format: "jwk" }) as object),
      kid: encryptOnly.kid,
      key_ops: ["encrypt", "wrapKey"],
    },
    {
      ...(good.publicKey.export({ format: "jwk" }) as object),
      e: "AQ",
      kid: E_ONE,
      alg: "RS256",
      use: "sig",
    },
    {
      ...(good.publicKey.export({ format: "jwk" }) as object),
      e: Buffer.from(`8${"0".repeat(510)}1`, "hex").toString("base64url"),
      kid: E_HUGE,
      alg: "RS256",
      use: "sig",
    },
  ];
  attacker = createServer((_req, res) => {
    attackerRequests += 1;
    res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ keys: [] }));
  });
  await new Promise<void>((resolve) => attacker.listen(0, "127.0.0.1", resolve));
  attackerUrl = `http://127.0.0.1:${(attacker.address() as AddressInfo).port}`;
  t = await startInProcess({
    env: { LOG_LEVEL: "trace", JWKS_URL: idp.jwksUrl, JWT_ISSUER: idp.issuer, JWT_AUDIENCE: AUDIENCE },
  });
  await t.tollgate.providerKeys?.ready();
});

afterAll(async () => {
  await t?.close();
  await idp?.close();
  await new Promise((resolve) => attacker?.close(resolve));
});

let subjects = 0;
const claims = (extra: Record<string, unknown> = {}) => {
  subjects += 1;
  return { iss: idp.issuer, aud: AUDIENCE, sub: `attacked-${subjects}`, exp: now() + 300, ...extra };
};
let ips = 0;
const check = async (token: string): Promise<{ status: number; message: string | undefined }> => {
  ips += 1;
  const res = await fetch(`${t.checkUrl}/ext_authz/api/products`, {
    // An address per check: bad tokens count against the address's anonymous window.
    headers: { authorization: `Bearer ${token}`, "x-forwarded-for": `10.77.${ips >> 8}.${ips & 255}` },
  });
  const body = await res.text();
  return { status: res.status, message: res.status === 200 ? undefined : JSON.parse(body).message };
};

/** A good token of `good`'s whose signature segment contains `-` or `_` (retried until it does). */
function tokenWithUrlAlphabet(): string {
  for (;;) {
    const token = signToken(good, claims());
    if (/[-_]/.test(token.slice(token.lastIndexOf(".") + 1))) return token;
  }
}

describe("a provider token whose signature segment is not in base64url's one form", () => {
  const ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  /** The same signature bytes, spelt another way: each would be a new valid token text. */
  const variants: Array<[string, (token: string) => string]> = [
    ["with base64's padding", (token) => `${token}==`],
    [
      "with a last character whose unused bits are set",
      (token) => {
        // RS256 of 2048 bits: 256 bytes, so the last character carries 4 unused bits.
        const last = ALPHABET.indexOf(token.at(-1) as string);
        return `${token.slice(0, -1)}${ALPHABET[last ^ 1]}`;
      },
    ],
    ["in base64's alphabet (+ and /)", (token) => token.replace(/-/g, "+").replace(/_/g, "/")],
    ["with a tab inside", (token) => `${token.slice(0, -20)}\t${token.slice(-20)}`],
    ["with a character outside any base64 alphabet", (token) => `${token.slice(0, -20)}!${token.slice(-20)}`],
  ];

  it.each(variants)(
    "answers 401 malformed token to one %s, though the bytes verify",
    async (_name, respell) => {
      const token = tokenWithUrlAlphabet();
      expect((await check(token)).status).toBe(200);
      const respelt = respell(token);
      expect(respelt).not.toBe(token);
      expect(await check(respelt)).toEqual(MALFORMED);
    },
  );

  it("answers 401 to a header or payload segment holding characters outside base64url, signed as sent", async () => {
    const [header, payload] = signToken(good, claims()).split(".") as [string, string];
    expect((await check(signedAs(`${header}.${payload}`))).status).toBe(200);
    expect(await check(signedAs(`${header}.${payload}=`))).toEqual(MALFORMED);
    expect(await check(signedAs(`${header}=.${payload}`))).toEqual(MALFORMED);
  });
});

/** A token of exactly `input`, signed RS256 with the good key: spellings no provider makes. */
const signedAs = (input: string): string =>
  `${input}.${sign("sha256", Buffer.from(input), good.privateKey).toString("base64url")}`;

describe("a provider token's header", () => {
  it("refuses a kid that is not a string, rather than trying it as a token without one", async () => {
    for (const kid of [123, ["good"], { id: "good" }, null, true]) {
      const answer = await check(signToken(good, claims(), { kid }));
      expect(answer, JSON.stringify(kid)).toEqual({ status: 401, message: "token key id invalid" });
    }
    // A kid of the JWKS, as a string, and no kid at all, still verify.
    expect((await check(signToken(good, claims()))).status).toBe(200);
    expect((await check(signToken(good, claims(), { kid: undefined }))).status).toBe(200);
  });

  it("refuses an alg of another spelling: lower case, a trailing space or NUL, a zero-width space", async () => {
    for (const alg of ["rs256", "RS256 ", "RS256\u0000", "RS256\u200b"]) {
      const answer = await check(signToken(good, claims(), { alg }));
      expect(answer, JSON.stringify(alg)).toEqual({ status: 401, message: "algorithm not allowed" });
    }
  });

  it("reads the last of two members of one name, for choosing the path and checking alike", async () => {
    const header = JSON.stringify({ alg: "RS256", typ: "JWT", kid: "good" });
    const iss = JSON.stringify(idp.issuer);
    const rest = `"aud":"${AUDIENCE}","sub":"twice","exp":${now() + 300}`;
    const spelt = (head: string, body: string) =>
      signedAs(`${Buffer.from(head).toString("base64url")}.${Buffer.from(body).toString("base64url")}`);
    expect((await check(spelt(header, `{"iss":"https://evil.example/","iss":${iss},${rest}}`))).status).toBe(
      200,
    );
    expect(await check(spelt(header, `{"iss":${iss},"iss":"https://evil.example/",${rest}}`))).toMatchObject({
      status: 401,
    });
    expect(await check(spelt(header, `{"iss":${iss},${rest},"exp":${now() - 300}}`))).toEqual({
      status: 401,
      message: "token expired",
    });
    const noneLast = `{"alg":"RS256","typ":"JWT","kid":"good","alg":"none"}`;
    expect(await check(spelt(noneLast, `{"iss":${iss},${rest}}`))).toEqual({
      status: 401,
      message: "algorithm not allowed",
    });
  });

  it("never takes a key from the token: an embedded jwk, a jku or x5u of the attacker's are not used or fetched", async () => {
    const mine = makeKey("good");
    const jwk = { ...(mine.publicKey.export({ format: "jwk" }) as object), kid: "good" };
    const forged = [
      signToken(mine, claims(), { jwk }),
      signToken(mine, claims(), { jku: `${attackerUrl}/jwks.json` }),
      signToken(mine, claims(), { x5u: `${attackerUrl}/cert.pem`, kid: "attacker" }),
      signToken(mine, claims(), { jku: `${attackerUrl}/jwks.json`, kid: "attacker-kid" }),
    ];
    for (const token of forged) expect((await check(token)).status).toBe(401);
    expect(attackerRequests).toBe(0);
  });

  it("never takes a key from an x5c chain in the header: the attacker's own certificate verifies nothing", async () => {
    const files = selfSignedCert("tollgate-x5c-");
    const der = (pem: string) => pem.replace(/-----[^-]+-----|\s/g, "");
    const privateKey = createPrivateKey(readFileSync(files.key));
    const attackerKey: TestKey = {
      kid: "attacker",
      alg: "ES256",
      privateKey,
      publicKey: createPublicKey(privateKey),
    };
    const x5c = [der(readFileSync(files.cert, "utf8"))];
    for (const header of [{ x5c }, { x5c, kid: undefined }, { x5c, kid: "good" }]) {
      const answer = await check(signToken(attackerKey, claims(), header));
      expect(answer.status, JSON.stringify(Object.keys(header))).toBe(401);
    }
    expect(attackerRequests).toBe(0);
  });

  it("refuses a header with crit, whatever it names (RFC 7515: an extension not understood)", async () => {
    for (const header of [{ crit: ["exp"], exp: now() + 60 }, { crit: ["b64"], b64: false }, { crit: [] }]) {
      const answer = await check(signToken(good, claims(), header));
      expect(answer, JSON.stringify(header)).toEqual({
        status: 401,
        message: "token has critical header parameters",
      });
    }
  });
});

describe("keys of the JWKS that verify nothing", () => {
  it("passes over a key published with use enc", async () => {
    expect(await check(signToken(encUse, claims()))).toEqual({
      status: 401,
      message: "token signing key unknown",
    });
  });

  it("never verifies with a key whose alg is not the token's: an RS256 token against a PS256 key", async () => {
    const token = signToken(psOnly, claims());
    // The signature is good for the key's numbers: refused only for the alg the JWK names.
    const input = token.slice(0, token.lastIndexOf("."));
    const signature = Buffer.from(token.slice(token.lastIndexOf(".") + 1), "base64url");
    expect(verify("sha256", Buffer.from(input), psOnly.publicKey, signature)).toBe(true);
    expect(await check(token)).toEqual({ status: 401, message: "token signature invalid" });
    // The same key, under PS256 as the JWK says, verifies.
    expect((await check(signToken({ ...psOnly, alg: "PS256" }, claims()))).status).toBe(200);
  });

  it("never verifies an ES256 token with a P-384 key, with or without an alg in its JWK", async () => {
    for (const kid of [p384.kid, "p384-as-es256"]) {
      const input = `${b64({ alg: "ES256", typ: "JWT", kid })}.${b64(claims())}`;
      const signature = sign("sha256", Buffer.from(input), {
        key: p384.privateKey,
        dsaEncoding: "ieee-p1363",
      });
      // node:crypto itself takes a SHA-256 signature of a P-384 key.
      expect(
        verify("sha256", Buffer.from(input), { key: p384.publicKey, dsaEncoding: "ieee-p1363" }, signature),
      ).toBe(true);
      expect(await check(`${input}.${signature.toString("base64url")}`), kid).toEqual({
        status: 401,
        message: "token signature invalid",
      });
    }
  });

  it("keeps two keys published under one kid, each verifying its own tokens and no forgery", async () => {
    expect((await check(signToken(twinA, claims()))).status).toBe(200);
    expect((await check(signToken(twinB, claims()))).status).toBe(200);
    expect(await check(signToken(makeKey("twin"), claims()))).toEqual({
      status: 401,
      message: "token signature invalid",
    });
  });

  it("refuses an RSA key under 2048 bits: a token it signed is not accepted", async () => {
    expect(await check(signToken(weak, claims()))).toEqual({
      status: 401,
      message: "token signing key unknown",
    });
  });

  it("refuses an RSA key with public exponent 1, under which anyone can sign", async () => {
    const input = `${b64({ alg: "RS256", typ: "JWT", kid: E_ONE })}.${b64(claims())}`;
    // PKCS #1 v1.5 of the input's SHA-256, as the "signature": raised to the power 1, it is itself.
    const digestInfo = Buffer.concat([
      Buffer.from("3031300d060960864801650304020105000420", "hex"),
      createHash("sha256").update(input).digest(),
    ]);
    const padded = Buffer.concat([
      Buffer.from([0, 1]),
      Buffer.alloc(256 - 3 - digestInfo.length, 0xff),
      Buffer.from([0]),
      digestInfo,
    ]);
    // Refused because the key is not kept, not for anything else the token says.
    expect(await check(`${input}.${padded.toString("base64url")}`)).toEqual({
      status: 401,
      message: "token signing key unknown",
    });
  });

  it("refuses an RSA key whose public exponent is over 2^32 - 1: a token naming it costs no verification", async () => {
    // Were the key kept, this token would be checked against it (and fail, costing milliseconds).
    expect(await check(signToken(good, claims(), { kid: E_HUGE }))).toEqual({
      status: 401,
      message: "token signing key unknown",
    });
  });

  it("refuses a key published with its private members: whoever read the JWKS can sign", async () => {
    expect(await check(signToken(leaked, claims()))).toEqual({
      status: 401,
      message: "token signing key unknown",
    });
  });

  it("refuses a key whose key_ops do not include verify", async () => {
    expect(await check(signToken(encryptOnly, claims()))).toEqual({
      status: 401,
      message: "token signing key unknown",
    });
  });

  it("says which keys it refused and why, by kid, never with their numbers", () => {
    const refused = t
      .logWrites()
      .map((line) => JSON.parse(line) as Record<string, unknown>)
      .filter((line) => line.event === "provider_key_refused");
    expect(refused.map((line) => [line.level, line.kid]).sort()).toEqual([
      ["warn", E_HUGE],
      ["warn", E_ONE],
      ["warn", "leaked"],
      ["warn", "weak-1024"],
    ]);
    const text = JSON.stringify(refused);
    const leakedJwk = leaked.privateKey.export({ format: "jwk" });
    for (const secret of [
      leakedJwk.d,
      leakedJwk.n,
      (weak.publicKey.export({ format: "jwk" }) as { n: string }).n,
    ]) {
      expect(text).not.toContain((secret as string).slice(0, 40));
    }
  });
});

describe("a provider token's claims", () => {
  it("takes an aud list that holds JWT_AUDIENCE among others, and refuses lists and values that do not", async () => {
    expect((await check(signToken(good, claims({ aud: ["api://other", AUDIENCE] })))).status).toBe(200);
    for (const aud of [[], ["api://other"], [[AUDIENCE]], { [AUDIENCE]: true }, null, `${AUDIENCE} `]) {
      expect(await check(signToken(good, claims({ aud }))), JSON.stringify(aud)).toEqual({
        status: 401,
        message: "token audience not accepted",
      });
    }
  });

  it("refuses an iss that differs from JWT_ISSUER in any character, a slash or a space included", async () => {
    for (const iss of [
      idp.issuer.slice(0, -1),
      `${idp.issuer}/`,
      `${idp.issuer} `,
      idp.issuer.toUpperCase(),
    ]) {
      const answer = await check(signToken(good, claims({ iss })));
      expect(answer.status, iss).toBe(401);
      expect(answer.message, iss).toMatch(/^token issuer not accepted/);
    }
  });

  it("refuses a subject that is no string: a number, an object, a list, null, a boolean", async () => {
    for (const sub of [12345, { id: "x" }, ["x"], null, true]) {
      expect(await check(signToken(good, claims({ sub }))), JSON.stringify(sub)).toEqual({
        status: 401,
        message: "token subject invalid",
      });
    }
  });

  it("refuses an exp or nbf that is no number", async () => {
    for (const exp of ["9999999999", true, [now() + 300], { at: now() + 300 }, null]) {
      expect(await check(signToken(good, claims({ exp }))), JSON.stringify(exp)).toEqual({
        status: 401,
        message: "token has no expiry",
      });
    }
    for (const nbf of ["0", false, [0], {}, null]) {
      expect(await check(signToken(good, claims({ nbf }))), JSON.stringify(nbf)).toEqual({
        status: 401,
        message: "token not yet valid",
      });
    }
  });

  it("refuses an iat that is no number, as tollgate's own verifier does, and takes one ahead of the clock", async () => {
    for (const iat of ["1700000000", null, true, [now()], {}]) {
      expect(await check(signToken(good, claims({ iat }))), JSON.stringify(iat)).toEqual({
        status: 401,
        message: "token issue time invalid",
      });
    }
    expect(await check(signToken(good, claims({ iat: now() + 3_600 })))).toMatchObject({ status: 200 });
  });

  it("answers a token near the length bound whose header or claims are huge or nested deep, and refuses one past it", async () => {
    // Nested 5,500 deep: written as text, as JSON.stringify would overflow the stack on it.
    const deepClaims = `${JSON.stringify(claims()).slice(0, -1)},"nested":${"[".repeat(5_500)}${"]".repeat(5_500)}}`;
    const tokens = [
      signToken(good, claims(), { junk: "j".repeat(11_000) }),
      signedAs(
        `${b64({ alg: "RS256", typ: "JWT", kid: "good" })}.${Buffer.from(deepClaims).toString("base64url")}`,
      ),
      signToken(
        good,
        claims({ many: Object.fromEntries(Array.from({ length: 900 }, (_, i) => [`c${i}`, i])) }),
      ),
    ];
    for (const token of tokens) {
      expect(token.length).toBeLessThanOrEqual(16_000);
      expect((await check(token)).status).toBe(200);
    }
    expect(await check(signToken(good, claims({ pad: "p".repeat(12_000) })))).toEqual({
      status: 401,
      message: "token too long",
    });
  });
});

describe("logs at LOG_LEVEL=trace", () => {
  it("never hold a provider token or any part of one, accepted or refused", async () => {
    const tokens = [
      signToken(good, claims()),
      signToken(good, claims({ exp: now() - 60 })),
      signToken(makeKey("good"), claims()),
      signToken(good, claims(), { kid: "made-up" }),
    ];
    for (const token of tokens) await check(token);
    const log = t.logWrites().join("\n");
    for (const token of tokens) {
      for (const part of token.split(".")) expect(log).not.toContain(part.slice(0, 40));
    }
  });
});
