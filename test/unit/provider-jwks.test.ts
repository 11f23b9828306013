// A JWKS document read as keys: a key the provider lists twice is one key to verify with, under its
// kid and for tokens without one, so that a forged token costs one verification per distinct key;
// an RSA exponent that would make each verification costly is refused, and a JWKS of more keys than
// providers publish is read up to a bound.
import { generateKeyPairSync } from "node:crypto";
import { describe, expect, it } from "vitest";
import { type ProviderKey, readJwks } from "../../src/auth/provider-jwks.js";
import { makeKey, type TestKey } from "../support/jwks-server.js";

const jwk = (key: TestKey, extra: Record<string, unknown>) => ({
  ...(key.publicKey.export({ format: "jwk" }) as object),
  use: "sig",
  ...extra,
});

describe("a JWKS read as keys", () => {
  it("keeps a key listed twice under one kid once, and each key once for tokens without a kid", () => {
    const [a, b] = [makeKey("a"), makeKey("b")];
    const { keys, all } = readJwks({
      keys: [
        jwk(a, { kid: "k1", alg: "RS256" }),
        jwk(a, { kid: "k1", alg: "RS256" }),
        jwk(b, { kid: "k1", alg: "RS256" }),
        // The same numbers for another alg: another key to the verifier, which uses a key only for its alg.
        jwk(a, { kid: "k1", alg: "PS256" }),
        jwk(a, { kid: "k2", alg: "RS256" }),
      ],
    });
    const shown = (list: readonly ProviderKey[]) =>
      list.map((k) => [k.kid, k.alg, k.key.equals(a.publicKey) ? "a" : "b"]);
    expect(shown(keys.get("k1") ?? [])).toEqual([
      ["k1", "RS256", "a"],
      ["k1", "RS256", "b"],
      ["k1", "PS256", "a"],
    ]);
    expect(shown(keys.get("k2") ?? [])).toEqual([["k2", "RS256", "a"]]);
    expect(shown(all)).toEqual([
      ["k1", "RS256", "a"],
      ["k1", "RS256", "b"],
      ["k1", "PS256", "a"],
    ]);
  });

  it("keeps signature keys as real providers publish them: x5c and x5t, no alg, an issuer member, 4096 bits, EC and OKP", () => {
    const [entra, keycloak, big, ec, ed] = [
      makeKey("e"),
      makeKey("k"),
      makeKey("b"),
      makeKey("c", "ES256"),
      makeKey("d", "EdDSA"),
    ];
    const big4096 = { ...big, publicKey: generateKeyPairSync("rsa", { modulusLength: 4096 }).publicKey };
    // A certificate chain is read by no verifier here: the key's own numbers are what verifies.
    const x5c = ["MIIDBTCCAe2gAwIBAgIQZSAeaqWig4BHC1ksmNNcgjANBgkqhkiG9w0BAQsFADAt"];
    const { keys, refused } = readJwks({
      keys: [
        // Entra ID: no alg, x5t beside kid, the tenant's issuer in the key.
        jwk(entra, {
          kid: "entra",
          x5t: "entra",
          x5c,
          issuer: "https://login.microsoftonline.com/{tenantid}/v2.0",
        }),
        // Keycloak: a signature key with its certificate, and an encryption key passed over.
        jwk(keycloak, { kid: "kc-sig", alg: "RS256", x5c, x5t: "a", "x5t#S256": "b" }),
        jwk(keycloak, { kid: "kc-enc", alg: "RSA-OAEP", use: "enc" }),
        jwk(big4096, { kid: "big", alg: "RS256" }),
        jwk(ec, { kid: "ec", alg: "ES256", crv: "P-256" }),
        { ...jwk(ed, { kid: "ed" }), use: undefined },
      ],
    });
    expect(refused).toEqual([]);
    expect([...keys.keys()]).toEqual(["entra", "kc-sig", "big", "ec", "ed"]);
    expect(keys.get("entra")?.[0]?.alg).toBeUndefined();
  });

  it("refuses an RSA key whose public exponent is over 2^32 - 1, and keeps one of 2^32 - 1 beside it", () => {
    const a = makeKey("a");
    const withExponent = (e: bigint, kid: string) => {
      const hex = e.toString(16);
      return jwk(a, {
        kid,
        alg: "RS256",
        e: Buffer.from(hex.padStart(hex.length + (hex.length % 2), "0"), "hex").toString("base64url"),
      });
    };
    const { keys, refused } = readJwks({
      keys: [
        withExponent(2n ** 32n - 1n, "largest"),
        withExponent(2n ** 32n + 1n, "over"),
        // Odd and as long as the modulus: each verification would cost milliseconds.
        withExponent(2n ** 2047n + 1n, "huge"),
        jwk(makeKey("b"), { kid: "ordinary", alg: "RS256" }),
      ],
    });
    expect([...keys.keys()]).toEqual(["largest", "ordinary"]);
    expect(refused).toEqual([
      { kid: "over", reason: "an RSA key whose public exponent is over 2^32 - 1" },
      { kid: "huge", reason: "an RSA key whose public exponent is over 2^32 - 1" },
    ]);
  });

  it("keeps the first 100 keys of a JWKS and reads no entry after them, counting what it left", () => {
    const listed = Array.from({ length: 103 }, (_, i) => makeKey(`ec-${i}`, "ES256"));
    const leaked = makeKey("leaked");
    const { keys, all, refused, past } = readJwks({
      keys: [
        // Refused and passed over: no place among the 100.
        { ...(leaked.privateKey.export({ format: "jwk" }) as object), kid: "leaked", use: "sig" },
        jwk(listed[0] as TestKey, { kid: "enc", use: "enc" }),
        ...listed.map((k) => jwk(k, { kid: k.kid, alg: "ES256" })),
        // Past the bound: not even read, so not refused.
        { ...(leaked.privateKey.export({ format: "jwk" }) as object), kid: "leaked-late", use: "sig" },
      ],
    });
    expect(keys.size).toBe(100);
    expect(all).toHaveLength(100);
    expect(keys.has("ec-99")).toBe(true);
    expect(keys.has("ec-100")).toBe(false);
    expect(refused.map((r) => r.kid)).toEqual(["leaked"]);
    expect(past.notRead).toBe(4);
  });

  it("keeps a legitimate JWKS whole and says nothing is past the bounds", () => {
    const listed = [makeKey("rsa-1"), makeKey("rsa-2"), makeKey("ec-1", "ES256"), makeKey("ed-1", "EdDSA")];
    const { keys, past } = readJwks({ keys: listed.map((k) => jwk(k, { kid: k.kid, alg: k.alg })) });
    expect([...keys.keys()]).toEqual(["rsa-1", "rsa-2", "ec-1", "ed-1"]);
    expect(past).toEqual({ notRead: 0, untried: [] });
  });

  it("counts, per alg, the keys a token without a kid is not tried against: those past the first 10 that fit it", () => {
    const ec = Array.from({ length: 12 }, (_, i) => makeKey(`ec-${i}`, "ES256"));
    const rsa = makeKey("rsa");
    const { past } = readJwks({
      keys: [
        ...ec.map((k) => jwk(k, { kid: k.kid, alg: "ES256" })),
        // Without an alg, an RSA key fits RS256, RS384, RS512 and PS256: one key each, far from 10.
        jwk(rsa, { kid: rsa.kid }),
      ],
    });
    expect(past).toEqual({ notRead: 0, untried: [{ alg: "ES256", keys: 2 }] });
  });
});
