// A JWKS document read as keys: a key the provider lists twice is one key to verify with, under its
// kid and for tokens without one, so that a forged token costs one verification per distinct key;
// an RSA exponent that would make each verification costly is refused.
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
});
