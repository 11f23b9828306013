// A JWKS document read as keys: a key the provider lists twice is one key to verify with, under its
// kid and for tokens without one, so that a forged token costs one verification per distinct key.
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
});
