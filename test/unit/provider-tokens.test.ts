// Provider tokens' verification and what it costs: the claims a token states are checked before its
// signature, so an expired or foreign token costs no verification, yet a token passes only every
// check; a forged token retried costs one verification, until the key set changes. node:crypto's
// verify is counted (and still does the work); the key set is the test's own.
import { randomBytes } from "node:crypto";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import type { TokenCheck } from "../../src/auth/jwt.js";
import type { ProviderKey } from "../../src/auth/provider-jwks.js";
import type { ProviderKeys } from "../../src/auth/provider-keys.js";
import { createProviderTokens } from "../../src/auth/provider-tokens.js";
import type { ProviderSettings } from "../../src/config/identity-settings.js";
import { makeKey, signToken, type TestKey } from "../support/jwks-server.js";

const verifications = vi.hoisted(() => ({ count: 0 }));
vi.mock("node:crypto", async (importOriginal) => {
  const crypto = await importOriginal<typeof import("node:crypto")>();
  const verify = ((...args: Parameters<typeof crypto.verify>) => {
    verifications.count += 1;
    return (crypto.verify as (...a: unknown[]) => unknown)(...args);
  }) as typeof crypto.verify;
  return { ...crypto, verify, default: { ...crypto, verify } };
});

const ISSUER = "https://idp.example/";
const AUDIENCE = "api://unit";
const settings: ProviderSettings = {
  source: { kind: "jwks", url: "https://idp.example/jwks" },
  issuer: ISSUER,
  audiences: [AUDIENCE],
  algorithms: ["RS256", "ES256"],
  subjectClaim: "sub",
  tierClaim: undefined,
  defaultTier: "free",
  requireAtJwt: false,
  cacheSize: 10_000,
  clockToleranceSeconds: 5,
};

/**
 * A key set of the test's own: `set` swaps it and tells the listeners how, as a fetch would.
 * `refresh`: what a refresh for a missing key does (none runs without it); `refreshes` counts them.
 */
function testKeys(initial: TestKey[], refresh?: () => Promise<void>) {
  let current = initial;
  let refreshes = 0;
  const listeners: Parameters<ProviderKeys["onFetch"]>[0][] = [];
  const asProviderKey = (k: TestKey): ProviderKey => ({ key: k.publicKey, kid: k.kid, alg: k.alg });
  const keys: ProviderKeys = {
    candidates: (kid) => current.filter((k) => kid === undefined || k.kid === kid).map(asProviderKey),
    loaded: () => true,
    ready: () => Promise.resolve(),
    refreshForMissingKey: () => {
      if (refresh === undefined) return undefined;
      refreshes += 1;
      return refresh();
    },
    onFetch: (listener) => {
      listeners.push(listener);
    },
    start: () => undefined,
    stop: () => undefined,
  };
  const set = (next: TestKey[], change: { removed: boolean; added: boolean }) => {
    current = next;
    for (const l of listeners)
      l(
        { ok: true, keys: next.length, refreshInMs: 60_000, refused: [], past: { notRead: 0, untried: [] } },
        change,
      );
  };
  return { keys, set, refreshes: () => refreshes };
}

const now = () => Math.floor(Date.now() / 1000);
const claims = (extra: Record<string, unknown> = {}) => ({
  iss: ISSUER,
  aud: AUDIENCE,
  sub: `unit-${randomBytes(4).toString("hex")}`,
  exp: now() + 300,
  ...extra,
});
const parts = (token: string) => {
  const [header, payload] = token
    .split(".")
    .slice(0, 2)
    .map((p) => JSON.parse(Buffer.from(p, "base64url").toString()));
  return { header, payload };
};

const key = makeKey("k1");
/** The order n of P-256's group: (r, s) and (r, n - s) are both valid ECDSA signatures. */
const P256_ORDER = BigInt("0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551");
const other = makeKey("k1");

describe("provider token verification", () => {
  beforeEach(() => {
    verifications.count = 0;
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  /** Every key here is known: an answer never waits for a refresh. */
  const verifyWith = (tokens: ReturnType<typeof createProviderTokens>, token: string): TokenCheck => {
    const { header, payload } = parts(token);
    const check = tokens.verify(token, header, payload);
    if (check instanceof Promise) throw new Error("the check waited for a refresh");
    return check;
  };

  it.each([
    ["an expired token", { exp: now() - 60 }, "token expired"],
    ["a wrong audience", { aud: "api://someone-else" }, "token audience not accepted"],
    ["a wrong issuer", { iss: "https://evil.example/" }, "token issuer not accepted"],
    ["a token not yet valid", { nbf: now() + 120 }, "token not yet valid"],
    ["a token without exp", { exp: undefined }, "token has no expiry"],
    ["an exp that is a string of digits", { exp: "9999999999" }, "token has no expiry"],
    ["an exp that is null", { exp: null }, "token has no expiry"],
    ["an nbf that is a string", { nbf: "0" }, "token not yet valid"],
    ["a subject with a space", { sub: "a b" }, "token subject invalid"],
    ["an iat that is a string of digits", { iat: "1700000000" }, "token issue time invalid"],
  ])("refuses %s, correctly signed, without verifying its signature", (_what, extra, description) => {
    const tokens = createProviderTokens(settings, testKeys([key]).keys);
    expect(verifyWith(tokens, signToken(key, claims(extra)))).toMatchObject({ ok: false, description });
    expect(verifications.count).toBe(0);
  });

  it("refuses a token with good claims and a bad signature, and one signed by another key", () => {
    const tokens = createProviderTokens(settings, testKeys([key]).keys);
    const forged = `${signToken(key, claims()).slice(0, -6)}AAAAAA`;
    expect(verifyWith(tokens, forged)).toMatchObject({ ok: false, description: "token signature invalid" });
    expect(verifyWith(tokens, signToken(other, claims()))).toMatchObject({ ok: false });
    expect(verifications.count).toBe(2);
    expect(verifyWith(tokens, signToken(key, claims()))).toMatchObject({ ok: true });
  });

  it("costs one verification for a forged token however often it is retried", () => {
    const tokens = createProviderTokens(settings, testKeys([key]).keys);
    const forged = signToken(other, claims());
    for (let i = 0; i < 20; i += 1) {
      expect(verifyWith(tokens, forged)).toMatchObject({ ok: false, description: "token signature invalid" });
    }
    expect(verifications.count).toBe(1);
  });

  it("verifies a failed token again after a minute, and once the key set changes it may pass", () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    const { keys, set } = testKeys([key]);
    const tokens = createProviderTokens(settings, keys);
    const signedByOther = signToken(other, claims({ exp: now() + 3_600 }));
    verifyWith(tokens, signedByOther);
    vi.advanceTimersByTime(61_000);
    verifyWith(tokens, signedByOther);
    expect(verifications.count).toBe(2);
    // The provider replaces k1 with the key that signed it: the failure is forgotten.
    set([other], { removed: true, added: true });
    expect(verifyWith(tokens, signedByOther)).toMatchObject({ ok: true });
  });

  it("forgets failures on a key added alone, and keeps them across a fetch that changed nothing", () => {
    const { keys, set } = testKeys([key]);
    const tokens = createProviderTokens(settings, keys);
    const forged = signToken(other, claims());
    verifyWith(tokens, forged);
    set([key], { removed: false, added: false });
    verifyWith(tokens, forged);
    expect(verifications.count).toBe(1);
    set([key], { removed: false, added: true });
    verifyWith(tokens, forged);
    expect(verifications.count).toBe(2);
  });

  it("verifies again, against the refreshed keys, a token its kid's key failed, and never passes a forgery", async () => {
    const forger = makeKey("k1");
    const { keys, set, refreshes } = testKeys([key], async () => {
      // The provider replaced k1 under the same kid.
      set([other], { removed: true, added: true });
    });
    const tokens = createProviderTokens(settings, keys);
    const rotated = signToken(other, claims());
    const answer = tokens.verify(rotated, parts(rotated).header, parts(rotated).payload);
    expect(answer).toBeInstanceOf(Promise);
    expect(await answer).toMatchObject({ ok: true });
    expect(tokens.cached(rotated)).toMatchObject({ ok: true });
    const forged = signToken(forger, claims());
    expect(await tokens.verify(forged, parts(forged).header, parts(forged).payload)).toMatchObject({
      ok: false,
      description: "token signature invalid",
    });
    expect(refreshes()).toBe(2);
  });

  it("costs a forged token no second verification when the refresh brought no new key under its kid", async () => {
    const { keys } = testKeys([key], () => Promise.resolve());
    const tokens = createProviderTokens(settings, keys);
    const forged = signToken(other, claims());
    for (let i = 0; i < 3; i += 1) {
      expect(await tokens.verify(forged, parts(forged).header, parts(forged).payload)).toMatchObject({
        ok: false,
        description: "token signature invalid",
      });
    }
    expect(verifications.count).toBe(1);
  });

  it("verifies again, against the keys a refresh brought, a token without a kid that every key failed", async () => {
    const keyless = makeKey("");
    const replacement = makeKey("");
    const { keys, set, refreshes } = testKeys([keyless], async () => {
      // The provider replaced its only key, a key without a kid.
      set([replacement], { removed: true, added: true });
    });
    const tokens = createProviderTokens(settings, keys);
    const rotated = signToken(replacement, claims(), { kid: undefined });
    const answer = tokens.verify(rotated, parts(rotated).header, parts(rotated).payload);
    expect(answer).toBeInstanceOf(Promise);
    expect(await answer).toMatchObject({ ok: true });
    expect(refreshes()).toBe(1);
    // A valid token asks nothing.
    expect(verifyWith(tokens, signToken(replacement, claims(), { kid: undefined }))).toMatchObject({
      ok: true,
    });
    expect(refreshes()).toBe(1);
  });

  it("costs a forged token without a kid no second verification when the refresh brought no new key", async () => {
    const keyless = makeKey("");
    const { keys, refreshes } = testKeys([keyless, makeKey("k2")], () => Promise.resolve());
    const tokens = createProviderTokens(settings, keys);
    const forged = signToken(makeKey(""), claims(), { kid: undefined });
    for (let i = 0; i < 3; i += 1) {
      expect(await tokens.verify(forged, parts(forged).header, parts(forged).payload)).toMatchObject({
        ok: false,
        description: "token signature invalid",
      });
    }
    // Both keys tried once, then the failure remembered: the refreshes brought nothing to try.
    expect(verifications.count).toBe(2);
    expect(refreshes()).toBe(3);
  });

  it("tries a token without a kid against the first 10 keys that fit its alg, in the JWKS's order", () => {
    // An RSA key first: it fits no ES256 token and takes no place among the 10.
    const listed = [makeKey("rsa"), ...Array.from({ length: 12 }, (_, i) => makeKey(`ec-${i}`, "ES256"))];
    const tokens = createProviderTokens(settings, testKeys(listed).keys);
    const kidless = (signer: TestKey) => signToken(signer, claims(), { kid: undefined });
    expect(verifyWith(tokens, kidless(listed[10] as TestKey))).toMatchObject({ ok: true });
    expect(verifyWith(tokens, kidless(listed[11] as TestKey))).toMatchObject({
      ok: false,
      description: "token signature invalid",
    });
    verifications.count = 0;
    expect(verifyWith(tokens, kidless(makeKey("", "ES256")))).toMatchObject({ ok: false });
    expect(verifications.count).toBe(10);
    // A kid names its key wherever the JWKS lists it.
    expect(verifyWith(tokens, signToken(listed[12] as TestKey, claims()))).toMatchObject({ ok: true });
  });

  it("keeps no more than 1,000 failures: the oldest costs a verification again", () => {
    const tokens = createProviderTokens(settings, testKeys([key]).keys);
    const forged = Array.from({ length: 1_001 }, () => signToken(other, claims()));
    for (const token of forged) verifyWith(tokens, token);
    verifications.count = 0;
    verifyWith(tokens, forged[1_000] as string);
    expect(verifications.count).toBe(0);
    verifyWith(tokens, forged[0] as string);
    expect(verifications.count).toBe(1);
  });

  it.each([
    ["JWT", {}],
    ["jwt, in another case", { typ: "jwt" }],
    ["application/jwt", { typ: "application/jwt" }],
    ["at+jwt (RFC 9068)", { typ: "at+jwt" }],
    ["application/at+JWT", { typ: "application/at+JWT" }],
    ["no typ at all", { typ: undefined }],
    ["JOSE (RFC 7515's generic type)", { typ: "JOSE" }],
    ["application/jose", { typ: "application/jose" }],
  ])("accepts an access token whose header typ is %s", (_what, header) => {
    const tokens = createProviderTokens(settings, testKeys([key]).keys);
    expect(verifyWith(tokens, signToken(key, claims(), header))).toMatchObject({ ok: true });
  });

  it.each([
    ["an OIDC back-channel logout token", { typ: "logout+jwt" }],
    ["a DPoP proof", { typ: "dpop+jwt" }],
    ["a security event token", { typ: "secevent+jwt" }],
    ["a typ that is not a string", { typ: 42 }],
  ])("refuses %s by its header typ, without verifying its signature", (_what, header) => {
    const tokens = createProviderTokens(settings, testKeys([key]).keys);
    expect(verifyWith(tokens, signToken(key, claims(), header))).toMatchObject({
      ok: false,
      reason: "invalid",
      description: "token type not accepted",
    });
    expect(verifications.count).toBe(0);
  });

  it("refuses Keycloak's ID, refresh, offline and logout tokens by their typ claim, and takes its Bearer and DPoP access tokens", () => {
    const tokens = createProviderTokens(settings, testKeys([key]).keys);
    for (const typ of ["ID", "Refresh", "Offline", "Logout", "Serialized-ID", "id"]) {
      expect(verifyWith(tokens, signToken(key, claims({ typ })))).toMatchObject({
        ok: false,
        description: "token is not an access token",
      });
    }
    expect(verifications.count).toBe(0);
    for (const typ of ["Bearer", "DPoP"]) {
      expect(verifyWith(tokens, signToken(key, claims({ typ })))).toMatchObject({ ok: true });
    }
  });

  it("takes a token with a nonce claim: Keycloak has put one in access tokens too", () => {
    const tokens = createProviderTokens(settings, testKeys([key]).keys);
    expect(verifyWith(tokens, signToken(key, claims({ nonce: "n-0S6_WzA2Mj" })))).toMatchObject({ ok: true });
  });

  it("takes only at+jwt tokens when JWT_PROVIDER_REQUIRE_AT_JWT is set", () => {
    const tokens = createProviderTokens({ ...settings, requireAtJwt: true }, testKeys([key]).keys);
    for (const typ of ["at+jwt", "application/AT+JWT"]) {
      expect(verifyWith(tokens, signToken(key, claims(), { typ }))).toMatchObject({ ok: true });
    }
    for (const header of [{}, { typ: undefined }, { typ: "application/jwt" }]) {
      expect(verifyWith(tokens, signToken(key, claims(), header))).toMatchObject({
        ok: false,
        description: "token type must be at+jwt",
      });
    }
  });

  it("maps a tier claim that is a number or a boolean by its text, as Keycloak's int and boolean mappers write it", () => {
    const tierClaim = {
      name: "plan",
      map: new Map([
        ["2", "pro"],
        ["true", "enterprise"],
        ["basic", "free"],
      ]),
    };
    const tokens = createProviderTokens({ ...settings, tierClaim }, testKeys([key]).keys);
    const tierOf = (plan: unknown) => {
      const check = verifyWith(tokens, signToken(key, claims({ plan })));
      return check.ok ? check.claims.tier : check.description;
    };
    expect(tierOf(2)).toBe("pro");
    expect(tierOf(true)).toBe("enterprise");
    expect(tierOf([false, 2])).toBe("pro");
    expect(tierOf("basic")).toBe("free");
    // No value the map knows, nor any that is no scalar: the default tier (""), as before.
    for (const plan of [3, false, null, { plan: 2 }, [[2]], "2.0"])
      expect(tierOf(plan), JSON.stringify(plan)).toBe("");
  });

  it("takes a number or a boolean tier claim as the tier's name without a map", () => {
    const tokens = createProviderTokens(
      { ...settings, tierClaim: { name: "plan", map: undefined } },
      testKeys([key]).keys,
    );
    const check = verifyWith(tokens, signToken(key, claims({ plan: 2 })));
    expect(check).toMatchObject({ ok: true, claims: { tier: "2" } });
  });

  it("reads a tier claim that is a list by its first value that names a tier, and one that is an object as none", () => {
    const tokens = createProviderTokens(
      { ...settings, tierClaim: { name: "plan", map: undefined } },
      testKeys([key]).keys,
    );
    const tierOf = (plan: unknown) => {
      const check = verifyWith(tokens, signToken(key, claims({ plan })));
      return check.ok ? check.claims.tier : check.description;
    };
    expect(tierOf([{ tier: "enterprise" }, null, "pro", "enterprise"])).toBe("pro");
    for (const plan of [{ tier: "enterprise" }, { toString: "enterprise" }, [], [["pro"]], null]) {
      expect(tierOf(plan), JSON.stringify(plan)).toBe("");
    }
  });

  it("picks a list's tier by JWT_TIER_MAP's order, not the provider's: Okta lists Everyone among a pro user's groups", () => {
    const tierClaim = {
      name: "groups",
      map: new Map([
        ["Enterprise-Customers", "enterprise"],
        ["Pro-Customers", "pro"],
        ["Everyone", "free"],
      ]),
    };
    const tokens = createProviderTokens({ ...settings, tierClaim }, testKeys([key]).keys);
    const tierOf = (groups: unknown) => {
      const check = verifyWith(tokens, signToken(key, claims({ groups })));
      return check.ok ? check.claims.tier : check.description;
    };
    expect(tierOf(["Everyone", "Pro-Customers"])).toBe("pro");
    expect(tierOf(["Pro-Customers", "Everyone"])).toBe("pro");
    expect(tierOf(["Everyone", "Pro-Customers", "Enterprise-Customers"])).toBe("enterprise");
    expect(tierOf(["Everyone", "Staff"])).toBe("free");
    expect(tierOf(["Staff"])).toBe("");
  });

  it("reads a nested tier claim by its dotted path (Keycloak's roles), and a top-level name with dots whole (Auth0's)", () => {
    const map = new Map([
      ["premium", "pro"],
      ["basic", "free"],
    ]);
    const tierWith = (name: string, extra: Record<string, unknown>) => {
      const tokens = createProviderTokens({ ...settings, tierClaim: { name, map } }, testKeys([key]).keys);
      const check = verifyWith(tokens, signToken(key, claims(extra)));
      return check.ok ? check.claims.tier : check.description;
    };
    const keycloak = {
      realm_access: { roles: ["offline_access", "default-roles-acme", "premium"] },
      resource_access: { tollgate: { roles: ["basic"] }, account: { roles: ["view-profile"] } },
    };
    expect(tierWith("realm_access.roles", keycloak)).toBe("pro");
    expect(tierWith("resource_access.tollgate.roles", keycloak)).toBe("free");
    expect(tierWith("https://acme.example/plan", { "https://acme.example/plan": "premium" })).toBe("pro");
    // The whole name wins over a path that spells it.
    expect(tierWith("a.b", { "a.b": "premium", a: { b: "basic" } })).toBe("pro");
    // A path through a list, a missing member or an inherited one names no tier.
    for (const extra of [
      { realm_access: [{ roles: ["premium"] }] },
      { realm_access: {} },
      { realm_access: "premium" },
    ])
      expect(tierWith("realm_access.roles", extra), JSON.stringify(extra)).toBe("");
    expect(tierWith("realm_access.constructor", { realm_access: {} })).toBe("");
  });

  it("takes an aud that names any of JWT_AUDIENCE's audiences, as Entra ID's v1 tokens name the App ID URI or the client id", () => {
    const audiences = ["api://tollgate", "6e74172b-be56-4843-9ff4-e66a39bb12e3"];
    const tokens = createProviderTokens({ ...settings, audiences }, testKeys([key]).keys);
    for (const aud of [...audiences, [audiences[1], "https://graph.microsoft.com"]])
      expect(verifyWith(tokens, signToken(key, claims({ aud }))), JSON.stringify(aud)).toMatchObject({
        ok: true,
      });
    for (const aud of ["api://other", ["api://other"], "api://tollgate,6e74172b-be56-4843-9ff4-e66a39bb12e3"])
      expect(verifyWith(tokens, signToken(key, claims({ aud }))), JSON.stringify(aud)).toMatchObject({
        ok: false,
        description: "token audience not accepted",
      });
  });

  it("reads client_id as the audience of a token without aud (Cognito's access tokens), and refuses Cognito's ID tokens", () => {
    const tokens = createProviderTokens(
      { ...settings, audiences: ["5kq2c1cognitoclient"] },
      testKeys([key]).keys,
    );
    const cognito = {
      aud: undefined,
      client_id: "5kq2c1cognitoclient",
      token_use: "access",
      scope: "api/read",
    };
    expect(verifyWith(tokens, signToken(key, claims(cognito), { typ: undefined }))).toMatchObject({
      ok: true,
    });
    for (const extra of [
      { client_id: "another-client" },
      { client_id: ["5kq2c1cognitoclient"] },
      // An aud decides when there is one, whatever client_id says.
      { aud: "api://other" },
      { aud: null },
    ]) {
      const check = verifyWith(tokens, signToken(key, claims({ ...cognito, ...extra })));
      expect(check, JSON.stringify(extra)).toMatchObject({
        ok: false,
        description: "token audience not accepted",
      });
    }
    const idToken = { aud: "5kq2c1cognitoclient", token_use: "id", email: "a@example.com" };
    expect(verifyWith(tokens, signToken(key, claims(idToken)))).toMatchObject({
      ok: false,
      description: "token is not an access token",
    });
  });

  it("reads no iat: one ahead of this clock (a provider's running fast) passes, as RFC 7519 leaves it", () => {
    const tokens = createProviderTokens(settings, testKeys([key]).keys);
    expect(verifyWith(tokens, signToken(key, claims({ iat: now() + 3600 })))).toMatchObject({ ok: true });
  });

  it("accepts an ECDSA token's second signature (r, n - s), as every JOSE verifier does: two texts, two entries at most", () => {
    const ec = makeKey("ec-1", "ES256");
    const tokens = createProviderTokens(settings, testKeys([ec]).keys);
    const token = signToken(ec, claims());
    const [input, signature] = [
      token.slice(0, token.lastIndexOf(".")),
      token.slice(token.lastIndexOf(".") + 1),
    ];
    const bytes = Buffer.from(signature, "base64url");
    const s = BigInt(`0x${bytes.subarray(32).toString("hex")}`);
    const flipped = Buffer.from((P256_ORDER - s).toString(16).padStart(64, "0"), "hex");
    const twin = `${input}.${Buffer.concat([bytes.subarray(0, 32), flipped]).toString("base64url")}`;
    expect(twin).not.toBe(token);
    expect(verifyWith(tokens, token)).toMatchObject({ ok: true });
    expect(verifyWith(tokens, twin)).toMatchObject({ ok: true });
    expect(tokens.cached(token)).toMatchObject({ ok: true });
    expect(tokens.cached(twin)).toMatchObject({ ok: true });
  });

  it("keeps at most JWT_PROVIDER_CACHE_SIZE verified tokens, and 4 KiB of token text per entry", () => {
    const tokens = createProviderTokens({ ...settings, cacheSize: 3 }, testKeys([key]).keys);
    const four = Array.from({ length: 4 }, () => signToken(key, claims()));
    for (const token of four) verifyWith(tokens, token);
    expect(tokens.cached(four[0] as string)).toBeUndefined();
    for (const token of four.slice(1)) expect(tokens.cached(token)).toMatchObject({ ok: true });
    // Two tokens of over 8.5 KiB pass the floor of 16 KiB (3 × 4 KiB is under it), one does not:
    // the older goes, though the count allows 3.
    const long = Array.from({ length: 2 }, () => signToken(key, claims({ pad: "p".repeat(6_200) })));
    for (const token of long) expect(token.length).toBeGreaterThan(8.5 * 1024);
    for (const token of long) expect(token.length).toBeLessThan(12 * 1024);
    for (const token of long) verifyWith(tokens, token);
    expect(tokens.cached(long[0] as string)).toBeUndefined();
    expect(tokens.cached(long[1] as string)).toMatchObject({ ok: true });
  });

  it("keeps a token of the longest accepted however small JWT_PROVIDER_CACHE_SIZE is", () => {
    const tokens = createProviderTokens({ ...settings, cacheSize: 1 }, testKeys([key]).keys);
    const longest = signToken(key, claims({ pad: "p".repeat(11_500) }));
    expect(longest.length).toBeGreaterThan(15_000);
    expect(longest.length).toBeLessThanOrEqual(16_000);
    verifyWith(tokens, longest);
    expect(tokens.cached(longest)).toMatchObject({ ok: true });
  });

  it("keeps a verified token exactly while the verifier accepts it: JWT_CLOCK_TOLERANCE_SECONDS past exp, from the cache", () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    const start = 1_900_000_000_000;
    vi.setSystemTime(start);
    const exp = start / 1000 + 60;
    const { keys } = testKeys([key]);
    const tokens = createProviderTokens(settings, keys);
    const token = signToken(key, claims({ exp }));
    expect(verifyWith(tokens, token)).toMatchObject({ ok: true });
    /** What a verifier that never saw the token answers now. */
    const verifier = () => verifyWith(createProviderTokens(settings, keys), token);
    // Past exp, inside the 5 s leeway: the verifier accepts, and the cache answers without a check.
    for (const at of [exp * 1000, (exp + 5) * 1000 - 1]) {
      vi.setSystemTime(at);
      verifications.count = 0;
      expect(tokens.cached(token), `at exp + ${at / 1000 - exp} s`).toMatchObject({ ok: true });
      expect(verifications.count).toBe(0);
      expect(verifier()).toMatchObject({ ok: true });
    }
    // At exp + leeway both refuse, and after it.
    for (const at of [(exp + 5) * 1000, (exp + 6) * 1000]) {
      vi.setSystemTime(at);
      expect(tokens.cached(token), `at exp + ${at / 1000 - exp} s`).toBeUndefined();
      expect(verifier()).toMatchObject({ ok: false, description: "token expired" });
    }
  });

  it("refuses from the cache, as the verifier does, a token whose nbf is ahead again once the clock is set back", () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    const start = 1_900_000_000_000;
    vi.setSystemTime(start);
    const { keys } = testKeys([key]);
    const tokens = createProviderTokens(settings, keys);
    // Not valid for 3 s more: inside the 5 s leeway.
    const token = signToken(key, claims({ nbf: start / 1000 + 3, exp: start / 1000 + 300 }));
    expect(verifyWith(tokens, token)).toMatchObject({ ok: true });
    vi.setSystemTime(start - 10_000);
    expect(tokens.cached(token)).toBeUndefined();
    expect(verifyWith(createProviderTokens(settings, keys), token)).toMatchObject({
      ok: false,
      description: "token not yet valid",
    });
    // The clock back where it was: the token was kept, and answers from the cache again.
    vi.setSystemTime(start);
    verifications.count = 0;
    expect(tokens.cached(token)).toMatchObject({ ok: true });
    expect(verifications.count).toBe(0);
  });

  it("answers a cache hit with the answer it kept, building nothing", () => {
    const tokens = createProviderTokens(settings, testKeys([key]).keys);
    const token = signToken(key, claims());
    const verified = verifyWith(tokens, token);
    expect(tokens.cached(token)).toBe(verified);
    expect(tokens.cached(token)).toBe(tokens.cached(token));
  });

  it("says a token of a provider's algorithm whose iss differs from JWT_ISSUER has a wrong issuer, and what differs", () => {
    const tokens = createProviderTokens(settings, testKeys([key]).keys);
    expect(tokens.foreignIssuer({ alg: "RS256" }, ISSUER.slice(0, -1))).toMatchObject({
      ok: false,
      description: "token issuer not accepted: it and JWT_ISSUER differ in a trailing slash",
    });
    expect(tokens.foreignIssuer({ alg: "ES384" }, "https://evil.example/")).toMatchObject({
      description: "token issuer not accepted",
    });
    expect(tokens.foreignIssuer({ alg: "EdDSA" }, undefined)).toMatchObject({
      description: "token issuer not accepted",
    });
    // Not a provider's algorithm: tollgate's own verifier says why it refuses.
    for (const alg of ["HS256", "none", undefined]) {
      expect(tokens.foreignIssuer({ alg }, ISSUER.slice(0, -1))).toBeUndefined();
    }
  });
});
