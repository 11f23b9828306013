// Access tokens: signed at login, verified on every check with an algorithm allow-list.
import { createPrivateKey, createPublicKey, createSecretKey, type KeyObject } from "node:crypto";
import jwt from "jsonwebtoken";
import type { JwtSettings } from "../config/env.js";
import type { Subject } from "../ratelimit/types.js";

/**
 * A verified credential's claims. `external`: one without a tollgate session (a provider token's
 * subject, an API key), whose profile the store reads instead (`sid` is then empty).
 */
export type Claims = { sub: string; sid: string; tier: string; exp: number; external?: External };

export type External =
  | { kind: "provider"; subject: Subject }
  | { kind: "key"; subject: Subject; hash: string };

export type TokenCheck =
  | { ok: true; claims: Claims }
  // "revoked": never from verify; the checker's, for a token whose session the store said is gone.
  | { ok: false; reason: "expired" | "invalid" | "revoked"; description: string };

export type TokenService = {
  sign(claims: { sub: string; sid: string; tier: string }): { token: string; expiresIn: number };
  verify(token: string): TokenCheck;
  /** A token verified before and not expired since, without any other work; else undefined. */
  cached(token: string): TokenCheck | undefined;
};

/** Ids that tollgate issues: safe in keys, headers and logs. */
export const ID_PATTERN = /^[A-Za-z0-9_-]{1,64}$/;
const MAX_TOKEN_LENGTH = 4096;

const invalid = (description: string): TokenCheck => ({ ok: false, reason: "invalid", description });

/** RFC 7515's compact form in base64url's own alphabet: no padding, no other characters. */
const COMPACT = /^[\w-]+\.[\w-]+\.[\w-]+$/;

/**
 * The signature's bytes when the token is spelt as RFC 7515 has it, else undefined. Node decodes
 * base64 leniently (padding, `+` and `/`, unused bits set, characters skipped): a token that
 * verified would verify again under other texts, each a new entry of the caches keyed by the text.
 */
export function signatureOf(token: string): Buffer | undefined {
  if (!COMPACT.test(token)) return undefined;
  const text = token.slice(token.lastIndexOf(".") + 1);
  const signature = Buffer.from(text, "base64url");
  return signature.toString("base64url") === text ? signature : undefined;
}

/** Verified tokens kept until their expiry, so a busy client costs one HMAC per token, not per request. */
const CACHE_SIZE = 10_000;

export function createTokenService(settings: JwtSettings): TokenService {
  const signing = settings.algorithms[0] ?? "HS256";
  // Key objects, built once: with a string key jsonwebtoken probes its type on every call, slowly.
  const secret =
    settings.secret === undefined ? undefined : createSecretKey(Buffer.from(settings.secret, "utf8"));
  const publicKey = settings.publicKey === undefined ? undefined : createPublicKey(settings.publicKey);
  const keyFor = (algorithm: string): KeyObject | undefined =>
    algorithm.startsWith("HS") ? secret : publicKey;
  const signingKey = signing.startsWith("HS")
    ? secret
    : settings.privateKey === undefined
      ? undefined
      : createPrivateKey(settings.privateKey);
  if (signingKey === undefined) throw new Error(`no key to sign ${signing} tokens`);
  const allowed = new Set<string>(settings.algorithms);
  const leeway = settings.clockToleranceSeconds;
  // The verified answer itself is kept (never changed by its readers): a check allocates nothing for it.
  const cache = new Map<string, Extract<TokenCheck, { ok: true }>>();
  const cachedCheck = (token: string): TokenCheck | undefined => {
    const cached = cache.get(token);
    if (cached === undefined) return undefined;
    // As long as verify would accept it again (JWT_CLOCK_TOLERANCE_SECONDS past exp), and no longer.
    if (cached.claims.exp + leeway > Date.now() / 1000) return cached;
    cache.delete(token);
    return undefined;
  };

  return {
    sign(claims) {
      const token = jwt.sign({ sub: claims.sub, sid: claims.sid, tier: claims.tier }, signingKey, {
        algorithm: signing,
        expiresIn: settings.ttlSeconds,
        issuer: settings.issuer,
        ...(settings.audience === undefined ? {} : { audience: settings.audience }),
      });
      return { token, expiresIn: settings.ttlSeconds };
    },

    cached: cachedCheck,

    verify(token) {
      const known = cachedCheck(token);
      if (known !== undefined) return known;
      const check = verifyUncached(token);
      if (check.ok) {
        if (cache.size >= CACHE_SIZE) cache.delete(cache.keys().next().value as string);
        cache.set(token, check);
      }
      return check;
    },
  };

  function verifyUncached(token: string): TokenCheck {
    if (token.length > MAX_TOKEN_LENGTH) return invalid("token too long");
    // jsonwebtoken reads an RS/ES/PS signature as leniently as node does: only its one spelling here.
    if (signatureOf(token) === undefined) return invalid("malformed token");
    let decoded: jwt.Jwt | null;
    try {
      // jws.decode throws (JSON.parse) on a `typ: JWT` header over a payload that is not JSON.
      decoded = jwt.decode(token, { complete: true });
    } catch {
      return invalid("malformed token");
    }
    if (decoded === null || typeof decoded.payload === "string") return invalid("malformed token");
    const algorithm: unknown = decoded.header.alg;
    // Checked before keyFor: a header may carry any JSON as `alg`, and keyFor needs a string.
    if (typeof algorithm !== "string" || !allowed.has(algorithm)) return invalid("algorithm not allowed");
    const key = keyFor(algorithm);
    if (key === undefined) return invalid("algorithm not allowed");
    let payload: jwt.JwtPayload | string;
    try {
      payload = jwt.verify(token, key, {
        algorithms: [algorithm as jwt.Algorithm],
        issuer: settings.issuer,
        ...(settings.audience === undefined ? {} : { audience: settings.audience }),
        clockTolerance: leeway,
      });
    } catch (error) {
      if (error instanceof jwt.TokenExpiredError)
        return { ok: false, reason: "expired", description: "token expired" };
      if (error instanceof jwt.NotBeforeError) return invalid("token not yet valid");
      return invalid("token signature or claims invalid");
    }
    if (typeof payload === "string") return invalid("malformed token");
    const { sub, sid, tier, exp } = payload;
    if (typeof exp !== "number") return invalid("token has no expiry");
    if (typeof sub !== "string" || !ID_PATTERN.test(sub)) return invalid("token subject invalid");
    if (typeof sid !== "string" || !ID_PATTERN.test(sid)) return invalid("token session invalid");
    return { ok: true, claims: { sub, sid, exp, tier: typeof tier === "string" ? tier : "" } };
  }
}
