// A request's credential, whichever it is: tollgate's own token, the provider's, or an API key. The
// path a token takes is chosen by its `iss`, and each path verifies with its own keys and its own
// algorithms only: a token that names the provider is never checked with tollgate's secret, and one
// that does not is never checked with a provider key (an HS256 token signed with a provider's public
// key fails both).
import { OWN_ISSUER } from "../config/identity-settings.js";
import { API_KEY_LENGTH, readApiKey } from "./api-keys.js";
import type { Claims, TokenCheck, TokenService } from "./jwt.js";
import type { ProviderTokens } from "./provider-tokens.js";
import { keySubject } from "./subjects.js";

/** The credential of one request: none, or its check (a Promise only while an unknown key is fetched). */
export type CredentialReader = (
  authorization: string | undefined,
  apiKey: string | undefined,
) => TokenCheck | Promise<TokenCheck> | undefined;

const NOT_OURS: TokenCheck = {
  ok: false,
  reason: "invalid",
  description: "expected a Bearer token or an API key",
};
const MALFORMED: TokenCheck = { ok: false, reason: "invalid", description: "malformed token" };
const TOO_LONG: TokenCheck = { ok: false, reason: "invalid", description: "token too long" };
const NOT_A_KEY: TokenCheck = { ok: false, reason: "invalid", description: "malformed API key" };
/**
 * A provider's tokens run long (Keycloak's with many roles, Entra ID's with groups, often past 4 KiB);
 * the bound caps the work one request's token costs (its payload is decoded to read `iss`). The
 * check listener takes 64 KiB of headers. tollgate's own tokens keep their 4 KiB bound (jwt.ts).
 * Never past 16,383: V8 hashes a longer string by its length alone, so tokens of one such length
 * would all collide in the token caches (Maps keyed by the token), each lookup comparing the new
 * token with every one kept, a cost a client could choose.
 */
export const MAX_PROVIDER_TOKEN_LENGTH = 16_000;

/**
 * Keys read before, with their claims: a client sends the same key on every request, and hashing
 * it each time was most of what an API key's check cost beyond a token's. Whether the key still
 * exists is the store's to say on every check (and a revoked one's hash is refused at once), so a
 * key kept here grants nothing by itself. Bounded: emptied when full.
 */
const KEYS_CACHED = 10_000;
const readKeys = new Map<string, TokenCheck>();

/** A key's claims: the key is its own subject; the store answers its tier and user. */
function keyCheck(sent: string): TokenCheck {
  // Only text shaped like a key is kept: padding or junk of any length must not grow the cache.
  const text = sent.trim();
  if (text.length !== API_KEY_LENGTH) return NOT_A_KEY;
  const known = readKeys.get(text);
  if (known !== undefined) return known;
  const key = readApiKey(text);
  if (key === undefined) return NOT_A_KEY;
  const claims: Claims = {
    sub: `key:${key.id}`,
    sid: "",
    tier: "",
    exp: Number.POSITIVE_INFINITY,
    external: { kind: "key", subject: keySubject(key.id), hash: key.hash },
  };
  const check: TokenCheck = { ok: true, claims };
  if (readKeys.size >= KEYS_CACHED) readKeys.clear();
  readKeys.set(text, check);
  return check;
}

/**
 * Why Authorization that is neither "Bearer <token>" nor "ApiKey <key>" is refused. RFC 9110 puts
 * only spaces between scheme and credentials: "ApiKey" with a tab, or with nothing after it, names
 * tollgate's scheme but malformed, and the client is told which part is wrong rather than to send
 * the scheme it sent. Any other scheme is not tollgate's.
 */
function refusedScheme(authorization: string): TokenCheck {
  const end = authorization.search(/[ \t]/);
  const scheme = (end < 0 ? authorization : authorization.slice(0, end)).toLowerCase();
  if (scheme === "apikey") return NOT_A_KEY;
  if (scheme === "bearer") return MALFORMED;
  return NOT_OURS;
}

function segment(text: string): Record<string, unknown> | undefined {
  try {
    const value: unknown = JSON.parse(Buffer.from(text, "base64url").toString("utf8"));
    return value !== null && typeof value === "object" && !Array.isArray(value)
      ? (value as Record<string, unknown>)
      : undefined;
  } catch {
    return undefined;
  }
}

export function createCredentialReader(options: {
  tokens: TokenService;
  provider: ProviderTokens | undefined;
}): CredentialReader {
  const { tokens, provider } = options;

  const bearer = (token: string): TokenCheck | Promise<TokenCheck> => {
    if (provider === undefined) return tokens.verify(token);
    if (token.length > MAX_PROVIDER_TOKEN_LENGTH) return TOO_LONG;
    const known = provider.cached(token) ?? tokens.cached(token);
    if (known !== undefined) return known;
    const dot1 = token.indexOf(".");
    const dot2 = token.indexOf(".", dot1 + 1);
    if (dot1 < 0 || dot2 < 0 || token.indexOf(".", dot2 + 1) >= 0) return MALFORMED;
    const payload = segment(token.slice(dot1 + 1, dot2));
    if (payload === undefined || payload.iss === OWN_ISSUER) return tokens.verify(token);
    const header = segment(token.slice(0, dot1));
    if (payload.iss !== provider.issuer) {
      // Refused by tollgate's verifier too (its tokens say OWN_ISSUER): only the reason given changes.
      return (
        (header === undefined ? undefined : provider.foreignIssuer(header, payload.iss)) ??
        tokens.verify(token)
      );
    }
    if (header === undefined) return MALFORMED;
    return provider.verify(token, header, payload);
  };

  return (authorization, apiKey) => {
    const keySent = apiKey !== undefined && apiKey !== "";
    if (authorization !== undefined && authorization !== "") {
      // "Bearer <token>" or "ApiKey <key>", schemes case-insensitive, as RFC 7235 has them: either
      // wins over the key header.
      const scheme = authorization.slice(0, 7).toLowerCase();
      if (scheme === "bearer ") return bearer(authorization.slice(7).trim());
      if (scheme === "apikey ") return keyCheck(authorization.slice(7));
      // Another scheme is not tollgate's (Basic credentials meant for the upstream): the key header,
      // when sent, is the request's credential.
      return keySent ? keyCheck(apiKey) : refusedScheme(authorization);
    }
    return keySent ? keyCheck(apiKey) : undefined;
  };
}
