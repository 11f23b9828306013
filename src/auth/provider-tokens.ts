// Tokens of the identity provider: verified with node:crypto against the provider's public keys
// (JWKS), only with the asymmetric algorithms allowed, then kept for as long as the verifier would
// accept them again, so that a busy client costs one signature check per token rather than per request.
import { constants, verify as cryptoVerify } from "node:crypto";
import {
  PROVIDER_ALGORITHMS,
  type ProviderAlgorithm,
  type ProviderSettings,
} from "../config/identity-settings.js";
import { externalSubject, PROVIDER_PREFIX } from "../ratelimit/types.js";
import { type Claims, signatureOf, type TokenCheck } from "./jwt.js";
import { type AcceptedSpan, acceptedSpan, claimsProblem, tierOf, typeProblem } from "./provider-claims.js";
import { fits, MAX_TRIED_WITHOUT_KID, type ProviderKey, sameKey } from "./provider-jwks.js";
import type { ProviderKeys } from "./provider-keys.js";
import { createTokenCache } from "./token-cache.js";

export type ProviderTokens = {
  /** A token whose `iss` is the provider's: verified here, never by tollgate's own keys. */
  verify(
    token: string,
    header: Record<string, unknown>,
    payload: Record<string, unknown>,
  ): TokenCheck | Promise<TokenCheck>;
  cached(token: string): TokenCheck | undefined;
  /**
   * A token of neither JWT_ISSUER nor tollgate's own issuer, read before tollgate's verifier sees
   * it: signed with an algorithm of a provider's, it is refused as a provider token of a wrong
   * issuer (an iss missing a trailing slash reads so, not as "algorithm not allowed"). Undefined
   * for any other algorithm: that token is tollgate's verifier's to refuse.
   */
  foreignIssuer(header: Record<string, unknown>, iss: unknown): TokenCheck | undefined;
  issuer: string;
};

/**
 * The verified tokens' total length, per entry of JWT_PROVIDER_CACHE_SIZE: the cache holds what
 * that many tokens of 4 KiB hold (40 MB at the default 10,000), whatever their length (up to 16,000 characters).
 */
const CACHE_CHARS_PER_ENTRY = 4096;
/**
 * Tokens whose signature failed, kept briefly: a client retrying one forged token costs one
 * verification, not one per request. Few and short-lived, as a flood of different forgeries gains
 * nothing from them; emptied whenever the key set changes, as a new key may verify them.
 */
const FAILED_SIZE = 1_000;
const FAILED_CHARS = 4 * 1024 * 1024;
const FAILED_TTL_MS = 60_000;
/**
 * How long a check whose key is missing (an unknown kid, or a signature the keys it may mean
 * failed) waits for the refresh it started or joined (a check's whole budget is ~200 ms).
 */
const MISSING_KEY_WAIT_MS = 100;

const invalid = (description: string): TokenCheck => ({ ok: false, reason: "invalid", description });

/**
 * A verified token's answer, kept whole (never changed by its readers: a hit allocates nothing), with
 * the span in which the verifier accepts the token.
 */
type Verified = { check: Extract<TokenCheck, { ok: true }>; span: AcceptedSpan };

const ASYMMETRIC = new Set<unknown>(PROVIDER_ALGORITHMS);
/** How node:crypto checks each algorithm's signature. */
const SCHEMES: Record<ProviderAlgorithm, { hash: string | null; pss?: true; ieee?: true }> = {
  RS256: { hash: "sha256" },
  RS384: { hash: "sha384" },
  RS512: { hash: "sha512" },
  PS256: { hash: "sha256", pss: true },
  ES256: { hash: "sha256", ieee: true },
  ES384: { hash: "sha384", ieee: true },
  EdDSA: { hash: null },
};

function signatureValid(
  algorithm: ProviderAlgorithm,
  key: ProviderKey,
  data: Buffer,
  signature: Buffer,
): boolean {
  const scheme = SCHEMES[algorithm];
  const options = scheme.pss
    ? { key: key.key, padding: constants.RSA_PKCS1_PSS_PADDING, saltLength: constants.RSA_PSS_SALTLEN_DIGEST }
    : scheme.ieee
      ? { key: key.key, dsaEncoding: "ieee-p1363" as const }
      : key.key;
  try {
    return cryptoVerify(scheme.hash, data, options, signature);
  } catch {
    return false;
  }
}

export function createProviderTokens(settings: ProviderSettings, keys: ProviderKeys): ProviderTokens {
  const allowed = new Set<string>(settings.algorithms);
  const issuerWithoutSlash = settings.issuer.replace(/\/+$/, "");
  const cache = createTokenCache<Verified>({
    maxEntries: settings.cacheSize,
    // Never under one token of the longest accepted (16,000 characters): a small cache still keeps one.
    maxChars: Math.max(settings.cacheSize, 4) * CACHE_CHARS_PER_ENTRY,
  });
  const failed = createTokenCache<number>({ maxEntries: FAILED_SIZE, maxChars: FAILED_CHARS });
  keys.onFetch((_outcome, change) => {
    // A key the provider withdrew verifies nothing more: tokens it verified are checked again.
    if (change.removed) cache.clear();
    // A key new to the set may verify what failed before.
    if (change.removed || change.added) failed.clear();
  });

  /** Whether the token's signature failed a short while ago, against the key set still in use. */
  const failedBefore = (token: string): boolean => {
    const until = failed.get(token);
    if (until === undefined) return false;
    if (until > Date.now()) return true;
    failed.delete(token);
    return false;
  };

  const cached = (token: string): TokenCheck | undefined => {
    const entry = cache.get(token);
    if (entry === undefined) return undefined;
    // Exactly as long as the verifier would accept the token (JWT_CLOCK_TOLERANCE_SECONDS past exp):
    // a hit there never costs a signature check, and past it the token is refused. Before nbf (a
    // clock set back), the verifier refuses it too.
    const now = Date.now() / 1000;
    if (entry.span.until <= now) {
      cache.delete(token);
      return undefined;
    }
    return entry.span.from > now ? undefined : entry.check;
  };

  /**
   * A refusal that fresh keys may lift: the refresh for a missing key is started (unless one ran
   * within its interval) or joined, and waited for a while; then `recheck` answers. Without a
   * refresh, the refusal stands at once.
   */
  const afterRefresh = (refused: TokenCheck, recheck: () => TokenCheck): TokenCheck | Promise<TokenCheck> => {
    const refresh = keys.refreshForMissingKey();
    if (refresh === undefined) return refused;
    const waited = new Promise<void>((resolve) => setTimeout(resolve, MISSING_KEY_WAIT_MS).unref());
    return Promise.race([refresh, waited]).then(recheck);
  };

  const check = (
    token: string,
    header: Record<string, unknown>,
    payload: Record<string, unknown>,
    candidates: readonly ProviderKey[],
    signature: Buffer,
  ): TokenCheck => {
    const algorithm = header.alg as ProviderAlgorithm;
    // Every key that fits, in the JWKS's order: one kid may name an RSA and an EC key. A token
    // without a kid may be any key's: only the first few are tried, so a forged one costs few checks.
    const fitting = candidates.filter((key) => fits(algorithm, key));
    const usable = header.kid === undefined ? fitting.slice(0, MAX_TRIED_WITHOUT_KID) : fitting;
    const data = Buffer.from(token.slice(0, token.lastIndexOf(".")), "latin1");
    if (!usable.some((key) => signatureValid(algorithm, key, data, signature))) {
      if (usable.length > 0) failed.set(token, Date.now() + FAILED_TTL_MS);
      return invalid("token signature invalid");
    }
    // Both checked by claimsProblem before the signature.
    const sub = payload[settings.subjectClaim] as string;
    const exp = payload.exp as number;
    const claims: Claims = {
      // The upstream's x-user-id, in a namespace of its own: tollgate's user ids hold no ':' and an
      // API key's is "key:<id>", so no provider account (whose subject a user may have chosen) can
      // pass upstream for a local user or a key.
      sub: `${PROVIDER_PREFIX}${sub}`,
      sid: "",
      tier: tierOf(settings, payload),
      exp,
      external: { kind: "provider", subject: externalSubject(sub) },
    };
    const verified = { ok: true as const, claims };
    cache.set(token, { check: verified, span: acceptedSpan(settings, payload) });
    return verified;
  };

  return {
    issuer: settings.issuer,
    cached,
    foreignIssuer(header, iss) {
      if (!ASYMMETRIC.has(header.alg)) return undefined;
      // Compared only to say so: the issuer must match exactly, as it must in OIDC_ISSUER's document.
      const slash = typeof iss === "string" && iss.replace(/\/+$/, "") === issuerWithoutSlash;
      return invalid(
        slash
          ? "token issuer not accepted: it and JWT_ISSUER differ in a trailing slash"
          : "token issuer not accepted",
      );
    },
    verify(token, header, payload) {
      const signature = signatureOf(token);
      if (signature === undefined) return invalid("malformed token");
      const algorithm = header.alg;
      if (typeof algorithm !== "string" || !allowed.has(algorithm)) return invalid("algorithm not allowed");
      // A header that asks for extensions tollgate does not know cannot be honoured.
      if (header.crit !== undefined) return invalid("token has critical header parameters");
      const refused = typeProblem(settings, header, payload) ?? claimsProblem(settings, payload);
      if (refused !== undefined) return refused;
      // A kid that is no string names no key (RFC 7515, 4.1.4): not read as a token without one.
      const { kid } = header;
      if (kid !== undefined && typeof kid !== "string") return invalid("token key id invalid");
      const verifyWith = (list: readonly ProviderKey[]) => check(token, header, payload, list, signature);
      const candidates = keys.candidates(kid);
      if (candidates.length > 0) {
        const known = failedBefore(token) ? invalid("token signature invalid") : verifyWith(candidates);
        if (known.ok) return known;
        // A token without a kid fails every key when the provider replaced its only one: it waits for
        // the same refresh, under the same interval, as a kid whose key failed.
        return afterRefresh(known, () => {
          // Only keys the refresh brought: a forged token costs no second check against the same key.
          const fresh = keys.candidates(kid).filter((k) => !candidates.some((c) => sameKey(c, k)));
          return fresh.length === 0 ? known : verifyWith(fresh);
        });
      }
      const unknown = invalid(
        keys.loaded() ? "token signing key unknown" : "the provider's keys are not loaded yet",
      );
      return afterRefresh(unknown, () => {
        const found = keys.candidates(kid);
        return found.length === 0 ? unknown : verifyWith(found);
      });
    },
  };
}
