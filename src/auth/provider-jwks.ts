// A JWKS document read as the keys it gives to verify signatures: keys of other uses are passed over,
// and keys no verifier should trust (weak RSA, an exponent that makes each check costly, a private
// key made public) are refused, by kid and reason, never with their numbers; a JWKS of more keys
// than providers publish is read up to a bound.
import { createPublicKey, type JsonWebKey, type KeyObject } from "node:crypto";
import { PROVIDER_ALGORITHMS, type ProviderAlgorithm } from "../config/identity-settings.js";

export type ProviderKey = { key: KeyObject; kid: string; alg: string | undefined };

/** Every key of a JWKS by its kid ("" for keys without one): a kid may name several (an RSA and an EC key). */
export type KeySet = Map<string, ProviderKey[]>;

/** A key of the JWKS that verifies nothing, and why: for the log. */
export type RefusedKey = { kid: string; reason: string };

/**
 * What the bounds left out: the JWKS's entries not read past MAX_KEYS kept keys, and for each alg
 * with more fitting keys than MAX_TRIED_WITHOUT_KID, how many a token without a kid is not tried against.
 */
export type PastBounds = { notRead: number; untried: { alg: ProviderAlgorithm; keys: number }[] };

/**
 * Keys kept from one JWKS; the entries after them are not read. Providers publish 2 to 10 (current,
 * next, previous; an RSA and an EC key each), while 1 MB holds some 1,400: a token whose kid names
 * many keys would cost a verification each.
 */
export const MAX_KEYS = 100;
/**
 * The keys a token without a kid is tried against: the first that fit its alg, in the JWKS's order.
 * Such a token may be any key's, and a forged one costs a verification per key tried.
 */
export const MAX_TRIED_WITHOUT_KID = 10;

/** RFC 7518, section 3.3: RS* and PS* keys of 2048 bits or more. Under it, a key can be factored. */
const MIN_RSA_BITS = 2048;
/**
 * The largest RSA public exponent kept: 2^32 − 1, what a 32-bit field holds (Windows CryptoAPI's
 * RSAPUBKEY; Go's crypto/rsa stops at 2^31 − 1). Each verification costs as many multiplications as
 * e has bits, and OpenSSL bounds e only on keys over 3072 bits: a 2048-bit e would make every check
 * of a token naming the key cost milliseconds. Providers publish 65537.
 */
const MAX_RSA_EXPONENT = 2n ** 32n - 1n;
/**
 * Members only a private JWK has (RFC 7518, section 6): a JWKS that holds one has published the key
 * that signs, and anyone who read it can sign tokens too.
 */
const PRIVATE_MEMBERS = ["d", "p", "q", "dp", "dq", "qi", "oth"];
/** A kid as the log shows it: the provider's text, cut short. */
const KID_SHOWN = 100;

/**
 * Whether the JWK says it is for something else than verifying signatures (RFC 7517, sections 4.2
 * and 4.3): `use` other than sig, or `key_ops` without verify. Such keys (Keycloak's enc keys) are
 * normal in a JWKS and passed over without a word.
 */
const otherUse = (jwk: Record<string, unknown>): boolean =>
  (jwk.use !== undefined && jwk.use !== "sig") ||
  (jwk.key_ops !== undefined && !(Array.isArray(jwk.key_ops) && jwk.key_ops.includes("verify")));

/** Why a readable key must verify nothing, or undefined when it may. */
function unsafe(jwk: Record<string, unknown>, key: KeyObject): string | undefined {
  if (PRIVATE_MEMBERS.some((name) => jwk[name] !== undefined)) {
    return "the JWKS publishes its private key: anyone who read it can sign";
  }
  if (key.asymmetricKeyType !== "rsa") return undefined;
  const { modulusLength = 0, publicExponent = 0n } = key.asymmetricKeyDetails ?? {};
  if (modulusLength < MIN_RSA_BITS) return `an RSA key of ${modulusLength} bits (${MIN_RSA_BITS} at least)`;
  // e=1 makes any padded hash its own signature; an even e is no RSA key.
  if (publicExponent < 3n || publicExponent % 2n === 0n) return "an RSA key whose public exponent is unsafe";
  if (publicExponent > MAX_RSA_EXPONENT) return "an RSA key whose public exponent is over 2^32 - 1";
  return undefined;
}

/** The key types (and curves) each algorithm verifies with: an RSA key never verifies ES256. */
const KEY_TYPES: Record<ProviderAlgorithm, string[]> = {
  RS256: ["rsa"],
  RS384: ["rsa"],
  RS512: ["rsa"],
  PS256: ["rsa", "rsa-pss"],
  ES256: ["ec:prime256v1"],
  ES384: ["ec:secp384r1"],
  EdDSA: ["ed25519", "ed448"],
};

function keyType(key: KeyObject): string {
  const type = key.asymmetricKeyType ?? "";
  return type === "ec" ? `ec:${key.asymmetricKeyDetails?.namedCurve ?? ""}` : type;
}

/** A key is used only with the algorithm it was published for, and only with its own key type (and curve). */
export const fits = (algorithm: ProviderAlgorithm, key: ProviderKey): boolean =>
  (key.alg === undefined || key.alg === algorithm) && KEY_TYPES[algorithm].includes(keyType(key.key));

/** For each alg, the keys a token without a kid would meet past MAX_TRIED_WITHOUT_KID. */
const untriedOf = (all: readonly ProviderKey[]): PastBounds["untried"] =>
  PROVIDER_ALGORITHMS.map((alg) => ({
    alg,
    keys: all.filter((key) => fits(alg, key)).length - MAX_TRIED_WITHOUT_KID,
  })).filter(({ keys }) => keys > 0);

/**
 * Whether two entries are one key to the verifier: the same numbers for the same alg (a key
 * published for another alg verifies other tokens).
 */
export const sameKey = (a: ProviderKey, b: ProviderKey): boolean => a.alg === b.alg && a.key.equals(b.key);

/** A key's public numbers and the alg it is published for: the same key listed twice is one key. */
const fingerprint = (key: KeyObject, alg: string | undefined): string =>
  JSON.stringify([alg ?? null, key.export({ format: "jwk" })]);

/**
 * The signature keys of a JWKS document, every one kept, several under one kid included; keys of
 * other uses, symmetric or unreadable ones are skipped, unsafe ones refused and listed. A key listed
 * again under the same kid (and alg) is kept once, and `all` (the keys a token without a kid is
 * tried against) holds each key once whatever its kids: a forged token costs one verification per
 * distinct key, not per line of the JWKS. Past MAX_KEYS kept keys, the JWKS is read no further.
 */
export function readJwks(body: unknown): {
  keys: KeySet;
  all: ProviderKey[];
  refused: RefusedKey[];
  past: PastBounds;
} {
  const keys: KeySet = new Map();
  let kept = 0;
  let notRead = 0;
  const all: ProviderKey[] = [];
  const refused: RefusedKey[] = [];
  const distinct = new Set<string>();
  const distinctByKid = new Set<string>();
  const list = (body as { keys?: unknown } | null)?.keys;
  if (!Array.isArray(list)) throw new Error("the JWKS has no keys array");
  for (const [index, jwk] of (list as Record<string, unknown>[]).entries()) {
    if (kept === MAX_KEYS) {
      notRead = list.length - index;
      break;
    }
    if (jwk === null || typeof jwk !== "object" || otherUse(jwk)) continue;
    if (jwk.kty !== "RSA" && jwk.kty !== "EC" && jwk.kty !== "OKP") continue;
    let key: KeyObject;
    try {
      key = createPublicKey({ key: jwk as JsonWebKey, format: "jwk" });
    } catch {
      // A key this process cannot read verifies nothing; the others still do.
      continue;
    }
    const kid = typeof jwk.kid === "string" ? jwk.kid : "";
    const reason = unsafe(jwk, key);
    if (reason !== undefined) {
      refused.push({ kid: kid.slice(0, KID_SHOWN), reason });
      continue;
    }
    const entry = { key, kid, alg: typeof jwk.alg === "string" ? jwk.alg : undefined };
    const print = fingerprint(key, entry.alg);
    const printByKid = JSON.stringify([kid, print]);
    if (distinctByKid.has(printByKid)) continue;
    distinctByKid.add(printByKid);
    kept += 1;
    const same = keys.get(kid);
    if (same === undefined) keys.set(kid, [entry]);
    else same.push(entry);
    if (distinct.has(print)) continue;
    distinct.add(print);
    all.push(entry);
  }
  return { keys, all, refused, past: { notRead, untried: untriedOf(all) } };
}
