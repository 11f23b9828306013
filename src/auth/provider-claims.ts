// What a provider token states, read before its key is looked up or its signature verified: its
// types (an access token, not an ID or logout token), iss, aud, exp, nbf, iat and subject, each check free
// of cost; and the tier it names.
import type { ProviderSettings } from "../config/identity-settings.js";
import type { TokenCheck } from "./jwt.js";

const invalid = (description: string): TokenCheck => ({ ok: false, reason: "invalid", description });

/** A subject must fit a header: visible ASCII, as every provider's ids are. */
const SUBJECT = /^[\x21-\x7e]{1,255}$/;

/**
 * A header `typ` an access token may carry, lower case (RFC 7515: case-insensitive, `application/`
 * optional): RFC 9068's at+jwt, or the JWT most providers (Keycloak, Entra ID, Auth0's default
 * profile) still write. Any other names another kind of token (logout+jwt, dpop+jwt, secevent+jwt).
 */
const ACCESS_TYPES = new Set([
  "jwt",
  "application/jwt",
  "at+jwt",
  "application/at+jwt",
  // RFC 7515's generic type (SPIFFE JWT-SVIDs, some Nimbus and jose4j issuers): says no more than JWT.
  "jose",
  "application/jose",
]);
/** With JWT_PROVIDER_REQUIRE_AT_JWT: RFC 9068's type only. */
const AT_JWT_TYPES = new Set(["at+jwt", "application/at+jwt"]);
/**
 * Keycloak's `typ` claim of its tokens other than access tokens (an access token's says Bearer, or
 * DPoP when bound to a key), lower case: its ID, refresh, offline and logout tokens carry the same
 * iss and, for an ID token, the client's id as aud.
 */
const NOT_ACCESS_CLAIMS = new Set(["id", "refresh", "offline", "logout", "serialized-id"]);

/**
 * A tier claim's value as text: a string as it is, a number or a boolean as JSON writes it (`2`,
 * `true`), which providers put there as readily (Keycloak's int and boolean mappers, an Auth0 Action
 * setting a number); anything else names no tier.
 */
function tierText(value: unknown): string | undefined {
  if (typeof value === "string") return value;
  if (typeof value === "boolean" || (typeof value === "number" && Number.isFinite(value)))
    return String(value);
  return undefined;
}

/**
 * The tier claim's value: the member of that whole name, else the one its dotted path names inside
 * objects (Keycloak's realm_access.roles, resource_access.<client>.roles). The whole name first:
 * Auth0's namespaced claims are top-level URLs, dots included (https://acme.example/plan).
 */
function claimValue(payload: Record<string, unknown>, name: string): unknown {
  if (Object.hasOwn(payload, name)) return payload[name];
  let value: unknown = payload;
  for (const segment of name.split(".")) {
    if (value === null || typeof value !== "object" || Array.isArray(value)) return undefined;
    if (!Object.hasOwn(value, segment)) return undefined;
    value = (value as Record<string, unknown>)[segment];
  }
  return value;
}

/**
 * The tier a token names, through the map; "" for none. Of a list (roles, groups), the value that
 * comes first in JWT_TIER_MAP, never the provider's order, which no provider promises (Okta lists
 * Everyone among a user's groups, Keycloak's roles come in no set order); without a map, its first
 * value.
 */
export function tierOf(settings: ProviderSettings, payload: Record<string, unknown>): string {
  const claim = settings.tierClaim;
  if (claim === undefined) return "";
  const value = claimValue(payload, claim.name);
  const texts = (Array.isArray(value) ? value : [value]).map(tierText);
  if (claim.map === undefined) return texts.find((text) => text !== undefined) ?? "";
  const held = new Set(texts);
  for (const [from, tier] of claim.map) if (held.has(from)) return tier;
  // An unknown value: the subject gets EXTERNAL_DEFAULT_TIER, as one without the claim does.
  return "";
}

/**
 * When a token is accepted, in Unix seconds: from its nbf (when it has one) less the leeway, until
 * its exp plus the leeway, that instant excluded. The verifier and the cache of verified tokens both
 * read it, so that neither accepts a token the other would refuse. exp and nbf are numbers here
 * (claimsProblem checks them first).
 */
export type AcceptedSpan = { from: number; until: number };

export function acceptedSpan(settings: ProviderSettings, payload: Record<string, unknown>): AcceptedSpan {
  const leeway = settings.clockToleranceSeconds;
  const { exp, nbf } = payload as { exp: number; nbf?: number };
  return { from: nbf === undefined ? Number.NEGATIVE_INFINITY : nbf - leeway, until: exp + leeway };
}

/**
 * Whether the token says it is something else than an access token (RFC 8725, section 3.11): an ID
 * token accepted as one would let any client's login pass as a call to the API whenever JWT_AUDIENCE
 * is a client's id. A token without a header `typ` passes (it is optional, and some providers leave
 * it out) unless JWT_PROVIDER_REQUIRE_AT_JWT asks for RFC 9068's. Not `nonce`: Keycloak has put it in
 * access tokens too (keycloak/keycloak#26893), and clients of older versions still get them.
 */
export function typeProblem(
  settings: ProviderSettings,
  header: Record<string, unknown>,
  payload: Record<string, unknown>,
): TokenCheck | undefined {
  const { typ } = header;
  const types = settings.requireAtJwt ? AT_JWT_TYPES : ACCESS_TYPES;
  if (typ === undefined ? settings.requireAtJwt : typeof typ !== "string" || !types.has(typ.toLowerCase())) {
    return invalid(settings.requireAtJwt ? "token type must be at+jwt" : "token type not accepted");
  }
  const claim = payload.typ;
  if (typeof claim === "string" && NOT_ACCESS_CLAIMS.has(claim.toLowerCase())) {
    return invalid("token is not an access token");
  }
  // Cognito's ID token: its aud is the client id, which a Cognito JWT_AUDIENCE names for access tokens.
  if (payload.token_use === "id") return invalid("token is not an access token");
  return undefined;
}

/**
 * What the token states, checked before its key is looked up or its signature verified: each check
 * costs nothing, so an expired or foreign token costs no verification and no refresh of the keys.
 * The order changes only the reason a bad token is given: a token is accepted only past them all.
 */
export function claimsProblem(
  settings: ProviderSettings,
  payload: Record<string, unknown>,
): TokenCheck | undefined {
  const now = Date.now() / 1000;
  const { exp, nbf, aud } = payload;
  if (payload.iss !== settings.issuer) return invalid("token issuer not accepted");
  // Without an aud, the client the token was issued to: Cognito's access tokens carry client_id only.
  const audiences: unknown[] = Array.isArray(aud) ? aud : [aud === undefined ? payload.client_id : aud];
  if (!audiences.some((a) => typeof a === "string" && settings.audiences.includes(a)))
    return invalid("token audience not accepted");
  if (typeof exp !== "number") return invalid("token has no expiry");
  if (nbf !== undefined && typeof nbf !== "number") return invalid("token not yet valid");
  const span = acceptedSpan(settings, payload);
  if (span.until <= now) return { ok: false, reason: "expired", description: "token expired" };
  if (span.from > now) return invalid("token not yet valid");
  // Its value is not compared (RFC 7519 makes iat information only), but it is a NumericDate, as
  // jsonwebtoken (tollgate's own tokens), jose and PyJWT insist too.
  if (payload.iat !== undefined && typeof payload.iat !== "number")
    return invalid("token issue time invalid");
  const sub = payload[settings.subjectClaim];
  if (typeof sub !== "string" || !SUBJECT.test(sub)) return invalid("token subject invalid");
  return undefined;
}
