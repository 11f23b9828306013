// A JWKS document read as the keys it gives to verify signatures.
import { createPublicKey, type JsonWebKey, type KeyObject } from "node:crypto";

export type ProviderKey = { key: KeyObject; kid: string; alg: string | undefined };

/** Every key of a JWKS by its kid ("" for keys without one): a kid may name several (an RSA and an EC key). */
export type KeySet = Map<string, ProviderKey[]>;

/**
 * The signature keys of a JWKS document, every one kept, several under one kid included; keys of
 * other uses, symmetric or unreadable ones are skipped.
 */
export function readJwks(body: unknown): KeySet {
  const keys: KeySet = new Map();
  const list = (body as { keys?: unknown } | null)?.keys;
  if (!Array.isArray(list)) throw new Error("the JWKS has no keys array");
  for (const jwk of list as Record<string, unknown>[]) {
    if (jwk === null || typeof jwk !== "object") continue;
    if (jwk.use !== undefined && jwk.use !== "sig") continue;
    if (jwk.kty !== "RSA" && jwk.kty !== "EC" && jwk.kty !== "OKP") continue;
    try {
      const key = createPublicKey({ key: jwk as JsonWebKey, format: "jwk" });
      const kid = typeof jwk.kid === "string" ? jwk.kid : "";
      const entry = { key, kid, alg: typeof jwk.alg === "string" ? jwk.alg : undefined };
      const same = keys.get(kid);
      if (same === undefined) keys.set(kid, [entry]);
      else same.push(entry);
    } catch {
      // A key this process cannot read verifies nothing; the others still do.
    }
  }
  return keys;
}
