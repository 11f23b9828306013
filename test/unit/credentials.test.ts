// The request's credential reader: API keys read once per key, and nothing a client pads a key with
// (or sends in its place) kept.

import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { afterEach, describe, expect, it, vi } from "vitest";
import { newApiKey } from "../../src/auth/api-keys.js";
import { createCredentialReader, MAX_PROVIDER_TOKEN_LENGTH } from "../../src/auth/credentials.js";
import { createTokenService } from "../../src/auth/jwt.js";
import type { ProviderKeys } from "../../src/auth/provider-keys.js";
import { createProviderTokens } from "../../src/auth/provider-tokens.js";
import { makeKey, publicPem, signHs256, signToken } from "../support/jwks-server.js";

const OWN: Parameters<typeof createTokenService>[0] = {
  algorithms: ["HS256"],
  secret: "x".repeat(40),
  secretGenerated: false,
  privateKey: undefined,
  publicKey: undefined,
  issuer: "tollgate",
  audience: undefined,
  ttlSeconds: 900,
  clockToleranceSeconds: 5,
};
const tokens = createTokenService(OWN);
const reader = createCredentialReader({ tokens, provider: undefined });

setFlagsFromString("--expose-gc");
const gc = runInNewContext("gc") as () => void;
const heapMb = () => {
  gc();
  return process.memoryUsage().heapUsed / 2 ** 20;
};

describe("API keys in the credential reader", () => {
  it("reads a key sent with spaces around it, and refuses text that is not shaped like a key", () => {
    const { id, key, hash } = newApiKey();
    const read = reader(undefined, `  ${key} `);
    expect(read).toMatchObject({ ok: true, claims: { sub: `key:${id}`, external: { kind: "key", hash } } });
    expect(reader(undefined, `${key}x`)).toMatchObject({ ok: false, reason: "invalid" });
    expect(reader(`ApiKey ${"a".repeat(63)}`, undefined)).toMatchObject({ ok: false, reason: "invalid" });
  });

  it("reads the key header beside Authorization of another scheme (Basic meant for the upstream)", () => {
    const { id, key } = newApiKey();
    const basic = `Basic ${Buffer.from("upstream-user:upstream-password").toString("base64")}`;
    for (const authorization of [basic, "Digest username=x", "Negotiate abc"]) {
      expect(reader(authorization, key)).toMatchObject({ ok: true, claims: { sub: `key:${id}` } });
    }
    // Without the key header, Authorization of another scheme is still refused.
    const notOurs = { ok: false, description: "expected a Bearer token or an API key" };
    expect(reader(basic, undefined)).toMatchObject(notOurs);
    expect(reader(basic, "")).toMatchObject(notOurs);
  });

  it("tells a client that sent tollgate's scheme with no credential or a tab after it what is malformed", () => {
    const { key } = newApiKey();
    const { token } = tokens.sign({ sub: "demo-alice", sid: "s1", tier: "free" });
    for (const authorization of ["ApiKey", "apikey", `ApiKey\t${key}`, `APIKEY\t\t${key}`]) {
      expect(reader(authorization, undefined), authorization).toMatchObject({
        ok: false,
        reason: "invalid",
        description: "malformed API key",
      });
    }
    for (const authorization of ["Bearer", "bearer", `Bearer\t${token}`]) {
      expect(reader(authorization, undefined), authorization).toMatchObject({
        ok: false,
        reason: "invalid",
        description: "malformed token",
      });
    }
    // Only the message is new: a scheme of tollgate's that merely starts the text is another scheme.
    expect(reader(`ApiKeys ${key}`, undefined)).toMatchObject({
      description: "expected a Bearer token or an API key",
    });
    // Not read as the scheme, so a key header beside it decides, as beside Basic.
    const beside = newApiKey();
    expect(reader(`ApiKey\t${key}`, beside.key)).toMatchObject({
      ok: true,
      claims: { sub: `key:${beside.id}` },
    });
    expect(reader("Bearer", beside.key)).toMatchObject({ ok: true, claims: { sub: `key:${beside.id}` } });
    // Any number of spaces is what RFC 9110 allows, and is read.
    expect(reader(`ApiKey    ${key}`, undefined)).toMatchObject({ ok: true });
  });

  it("reads a Bearer token or an ApiKey in Authorization over the key header", () => {
    const { key } = newApiKey();
    const other = newApiKey();
    const { token } = tokens.sign({ sub: "demo-alice", sid: "s1", tier: "free" });
    expect(reader(`Bearer ${token}`, key)).toMatchObject({ ok: true, claims: { sub: "demo-alice" } });
    expect(reader("Bearer not-a-token", key)).toMatchObject({ ok: false });
    expect(reader(`ApiKey ${other.key}`, key)).toMatchObject({
      ok: true,
      claims: { sub: `key:${other.id}` },
    });
  });

  it("keeps nothing of 5,000 keys padded with 60 KB of spaces each (before: the whole text, 600 MB for 10,000)", () => {
    const { key } = newApiKey();
    const before = heapMb();
    for (let i = 0; i < 5_000; i += 1) {
      const padding = " ".repeat(60_000 + i);
      expect(reader(`ApiKey ${padding}${key}`, undefined)).toMatchObject({ ok: true });
    }
    expect(heapMb() - before).toBeLessThan(50);
  });
});

describe("a provider token's length", () => {
  it("is bounded under V8's 16,384, past which strings hash by length alone and collide in the caches", () => {
    const seen: string[] = [];
    const provider = {
      issuer: "https://idp.example",
      cached: () => undefined,
      foreignIssuer: () => undefined,
      verify: (token: string) => {
        seen.push(token);
        return { ok: false as const, reason: "invalid" as const, description: "token signature invalid" };
      },
    };
    const read = createCredentialReader({ tokens, provider });
    const shaped = (length: number) => {
      const head = `${Buffer.from('{"alg":"RS256"}').toString("base64url")}.${Buffer.from(
        JSON.stringify({ iss: provider.issuer, pad: "" }),
      ).toString("base64url")}.`;
      return head + "s".repeat(length - head.length);
    };
    expect(MAX_PROVIDER_TOKEN_LENGTH).toBeLessThan(16_384);
    for (const length of [16_384, MAX_PROVIDER_TOKEN_LENGTH + 1]) {
      expect(read(`Bearer ${shaped(length)}`, undefined)).toMatchObject({ description: "token too long" });
    }
    expect(read(`Bearer ${shaped(MAX_PROVIDER_TOKEN_LENGTH)}`, undefined)).toMatchObject({
      description: "token signature invalid",
    });
    expect(seen.map((t) => t.length)).toEqual([MAX_PROVIDER_TOKEN_LENGTH]);
  });
});

describe("a token whose iss is neither the provider's nor tollgate's", () => {
  const ISSUER = "https://idp.example/";
  const idpKey = makeKey("k1", "ES256");
  const keys: ProviderKeys = {
    candidates: () => [{ key: idpKey.publicKey, kid: idpKey.kid, alg: idpKey.alg }],
    loaded: () => true,
    ready: () => Promise.resolve(),
    refreshForMissingKey: () => undefined,
    onFetch: () => undefined,
    start: () => undefined,
    stop: () => undefined,
  };
  const provider = createProviderTokens(
    {
      source: { kind: "jwks", url: "https://idp.example/jwks" },
      issuer: ISSUER,
      audiences: ["api://unit"],
      algorithms: ["ES256"],
      subjectClaim: "sub",
      tierClaim: undefined,
      defaultTier: "free",
      requireAtJwt: false,
      cacheSize: 100,
      clockToleranceSeconds: 5,
    },
    keys,
  );
  const claims = (iss: unknown) => ({
    iss,
    aud: "api://unit",
    sub: "someone",
    exp: Math.floor(Date.now() / 1000) + 300,
  });

  it("is refused as a provider token of a wrong issuer when a provider's algorithm signed it, naming a trailing slash", () => {
    const read = createCredentialReader({ tokens, provider });
    const bearer = (token: string) => read(`Bearer ${token}`, undefined);
    expect(bearer(signToken(idpKey, claims(ISSUER)))).toMatchObject({ ok: true });
    // Before: "algorithm not allowed", tollgate's own verifier's word for a token it never signs.
    expect(bearer(signToken(idpKey, claims("https://idp.example")))).toMatchObject({
      ok: false,
      reason: "invalid",
      description: "token issuer not accepted: it and JWT_ISSUER differ in a trailing slash",
    });
    expect(bearer(signToken(idpKey, claims("https://other.example/")))).toMatchObject({
      ok: false,
      description: "token issuer not accepted",
    });
    expect(bearer(signToken(idpKey, claims(undefined)))).toMatchObject({
      ok: false,
      description: "token issuer not accepted",
    });
  });

  it("never verifies a token with the other path's key: tollgate's secret never passes a provider token, nor a provider key tollgate's", () => {
    const read = createCredentialReader({ tokens, provider });
    const bearer = (token: string) => read(`Bearer ${token}`, undefined);
    const own = {
      sub: "demo-alice",
      sid: "s1",
      tier: "enterprise",
      exp: Math.floor(Date.now() / 1000) + 300,
    };
    // HS256 with tollgate's own secret: a valid own token with iss tollgate, nothing with the provider's.
    const secret = OWN.secret as string;
    expect(bearer(signHs256(secret, { ...own, iss: "tollgate" }))).toMatchObject({ ok: true });
    const asProvider = signHs256(secret, { ...claims(ISSUER), ...own, iss: ISSUER });
    expect(bearer(asProvider)).toMatchObject({ ok: false, description: "algorithm not allowed" });
    // The provider's key: a valid provider token with its iss, nothing with tollgate's.
    expect(bearer(signToken(idpKey, { ...claims(ISSUER), ...own, iss: ISSUER }))).toMatchObject({ ok: true });
    const asOwn = signToken(idpKey, { ...claims("tollgate"), ...own });
    expect(bearer(asOwn)).toMatchObject({ ok: false, description: "algorithm not allowed" });
    // The provider's public key as an HMAC secret, under either iss; an iss naming both.
    for (const iss of [ISSUER, "tollgate"]) {
      expect(bearer(signHs256(publicPem(idpKey), { ...claims(iss), ...own, iss }, idpKey.kid))).toMatchObject(
        {
          ok: false,
        },
      );
    }
    const both = signHs256(secret, { ...claims(ISSUER), ...own, iss: ["tollgate", ISSUER] });
    expect(bearer(both)).toMatchObject({ ok: false });
    for (const token of [asProvider, asOwn, both]) {
      expect(provider.cached(token)).toBeUndefined();
      expect(tokens.cached(token)).toBeUndefined();
    }
  });

  it("leaves tollgate's own tokens to its verifier, RS256 ones included, and an HS256 token of any iss", () => {
    const { privateKey, publicKey } = makeKey("own", "RS256");
    const own = createTokenService({
      algorithms: ["RS256"],
      secret: undefined,
      secretGenerated: false,
      privateKey: privateKey.export({ type: "pkcs8", format: "pem" }) as string,
      publicKey: publicKey.export({ type: "spki", format: "pem" }) as string,
      issuer: "tollgate",
      audience: undefined,
      ttlSeconds: 900,
      clockToleranceSeconds: 5,
    });
    const read = createCredentialReader({ tokens: own, provider });
    const { token } = own.sign({ sub: "demo-alice", sid: "s1", tier: "free" });
    expect(read(`Bearer ${token}`, undefined)).toMatchObject({ ok: true, claims: { sub: "demo-alice" } });
    const hs = createCredentialReader({ tokens, provider });
    const forged = signToken(makeKey("x", "RS256"), claims("https://idp.example"), { alg: "HS256" });
    expect(hs(`Bearer ${forged}`, undefined)).toMatchObject({
      ok: false,
      description: "token signature or claims invalid",
    });
  });
});

describe("tollgate's own verified-token cache", () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it("keeps a token exactly while the verifier accepts it, JWT_CLOCK_TOLERANCE_SECONDS past exp included", () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    vi.setSystemTime(1_900_000_000_500);
    const { token } = tokens.sign({ sub: "demo-alice", sid: "s1", tier: "free" });
    expect(tokens.verify(token)).toMatchObject({ ok: true });
    const exp = JSON.parse(Buffer.from(token.split(".")[1] as string, "base64url").toString()).exp as number;
    /** What a verifier that never saw the token answers now. */
    const verifier = () => createTokenService(OWN).verify(token);
    for (const [at, accepted] of [
      [(exp + 5) * 1000 - 1, true],
      [(exp + 5) * 1000, false],
    ] as const) {
      vi.setSystemTime(at);
      expect(tokens.cached(token)?.ok === true, `cache at exp + ${at / 1000 - exp} s`).toBe(accepted);
      expect(verifier().ok, `verifier at exp + ${at / 1000 - exp} s`).toBe(accepted);
    }
  });
});
