// Identities from outside tollgate: the identity provider's tokens (OIDC_ISSUER or JWKS_URL) and API keys.
import type { Reader } from "./env-reader.js";
import { isLoopbackHost } from "./hosts.js";

/** Signature algorithms a provider token may use: asymmetric only, so no public key ever becomes an HMAC secret. */
export const PROVIDER_ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "ES256", "ES384", "EdDSA"] as const;
export type ProviderAlgorithm = (typeof PROVIDER_ALGORITHMS)[number];

/** The issuer tollgate's own login tokens carry when a provider's tokens are accepted beside them. */
export const OWN_ISSUER = "tollgate";

export type ProviderSettings = {
  /**
   * Where the keys are found: an OIDC discovery document's jwks_uri, or a JWKS URL given directly.
   * `httpAnyHost`: a plain-http jwks_uri may name any host (outside production, or with
   * JWT_PROVIDER_ALLOW_HTTP=true); otherwise only a loopback one, as OIDC_ISSUER itself.
   */
  source: { kind: "oidc"; issuerUrl: string; httpAnyHost: boolean } | { kind: "jwks"; url: string };
  /** The `iss` every provider token must carry. */
  issuer: string;
  /**
   * JWT_AUDIENCE, a comma-separated list: a token's `aud` (or, without one, its `client_id`) must
   * name one. Entra ID's v1 tokens say the App ID URI or the client id, as the client asked.
   */
  audiences: readonly string[];
  algorithms: ProviderAlgorithm[];
  /** The claim naming the subject (`sub`). */
  subjectClaim: string;
  /**
   * The claim naming the tier, and how its values map to tiers (unmapped: the value itself); the
   * map's order is the precedence among a list's values.
   */
  tierClaim: { name: string; map: ReadonlyMap<string, string> | undefined } | undefined;
  /** The tier of a subject whose token names none (or one the policy does not know). */
  defaultTier: string;
  /** JWT_PROVIDER_REQUIRE_AT_JWT: only tokens whose header `typ` is RFC 9068's at+jwt. */
  requireAtJwt: boolean;
  /** JWT_PROVIDER_CACHE_SIZE: verified tokens kept while the verifier accepts them. */
  cacheSize: number;
  /** JWT_CLOCK_TOLERANCE_SECONDS, as for tollgate's own tokens: leeway on `exp` and `nbf`. */
  clockToleranceSeconds: number;
};

export type IdentitySettings = {
  provider: ProviderSettings | undefined;
  /** The request header that carries an API key (lower case); `Authorization: ApiKey …` works too. */
  apiKeyHeader: string;
  /** API_KEY_FORWARD: the upstream gets the API key too; by default an allow asks the proxy to drop it. */
  forwardApiKey: boolean;
};

const CLAIM = /^[\x21-\x7e]{1,256}$/;
const TIER = /^[a-z0-9_-]{1,32}$/;
const HEADER = /^[a-z0-9-]{1,64}$/;
/**
 * Headers the proxies set on the check themselves, tollgate sets for the upstream, or that frame the
 * request: as the API key's header, nginx and Envoy would copy the client's own (with x-original-uri,
 * the client's path beside the real one). The proxies' renderers refuse the same
 * (scripts/api-key-header.mjs; test/unit/api-key-header.test.ts compares them).
 */
export const RESERVED_HEADERS: ReadonlySet<string> = new Set([
  "authorization",
  "host",
  "content-length",
  "transfer-encoding",
  "connection",
  "x-original-uri",
  "x-original-method",
  "x-forwarded-for",
  "x-tollgate-client-ip",
  "x-request-id",
  "x-user-id",
  "x-user-tier",
  "x-session-id",
  "traceparent",
  "tracestate",
]);

function url(reader: Reader, name: "OIDC_ISSUER" | "JWKS_URL"): string | undefined {
  const value = reader.raw(name);
  if (value === undefined) return undefined;
  try {
    const parsed = new URL(value);
    if (parsed.username !== "" || parsed.password !== "") {
      // fetch refuses it, with a message that repeats it whole: said here once, without the value.
      reader.problems.push(`${name}: must not hold a user or password`);
      return undefined;
    }
    if (parsed.protocol === "https:" || parsed.protocol === "http:") return value;
  } catch {
    // reported below
  }
  // Not the value: a URL may carry a key in its query.
  reader.problems.push(`${name}: expected an http(s) URL`);
  return undefined;
}

/**
 * JWT_TIER_CLAIM names the claim (any name: Auth0's are URLs; a dotted path into objects, such as
 * Keycloak's realm_access.roles, when the token has no member of the whole name); JWT_TIER_MAP maps
 * its values to tiers, `<value>=<tier>,…` (e.g. `basic=free,premium=pro`), in order of precedence
 * for a list. Apart, so that a claim name never has to be told from the map.
 */
function parseTierClaim(reader: Reader): ProviderSettings["tierClaim"] {
  const name = reader.raw("JWT_TIER_CLAIM");
  const mapText = reader.raw("JWT_TIER_MAP");
  if (name === undefined) {
    if (mapText !== undefined) reader.problems.push("JWT_TIER_MAP: needs JWT_TIER_CLAIM (the claim it maps)");
    return undefined;
  }
  if (!CLAIM.test(name)) {
    reader.problems.push(`JWT_TIER_CLAIM: "${name}" is not a claim name (1 to 256 visible characters)`);
    return undefined;
  }
  if (mapText === undefined) return { name, map: undefined };
  const map = new Map<string, string>();
  for (const pair of mapText.split(",")) {
    const [from, to, ...rest] = pair.split("=").map((s) => s.trim());
    if (from === undefined || from === "" || to === undefined || !TIER.test(to) || rest.length > 0) {
      reader.problems.push(
        `JWT_TIER_MAP: expected <value>=<tier>,… such as basic=free,premium=pro; "${pair}" is not <value>=<tier>`,
      );
      return undefined;
    }
    map.set(from, to);
  }
  return { name, map };
}

function parseProviderAlgorithms(reader: Reader): ProviderAlgorithm[] {
  const value = reader.raw("JWT_PROVIDER_ALGORITHMS");
  if (value === undefined) return ["RS256", "ES256", "PS256", "EdDSA"];
  const out: ProviderAlgorithm[] = [];
  for (const item of value.split(",").map((s) => s.trim())) {
    const found = PROVIDER_ALGORITHMS.find((a) => a.toLowerCase() === item.toLowerCase());
    if (found === undefined) {
      reader.problems.push(
        `JWT_PROVIDER_ALGORITHMS: "${item}" is not allowed (use ${PROVIDER_ALGORITHMS.join(", ")}; never none or HS*)`,
      );
    } else if (!out.includes(found)) out.push(found);
  }
  return out.length > 0 ? out : ["RS256"];
}

/**
 * In production a provider's keys come over https: one plain-http fetch answered by someone else
 * would give tollgate their keys, and so any identity and tier. A loopback address (a sidecar) is
 * exempt, and JWT_PROVIDER_ALLOW_HTTP=true accepts a link the network already protects (a mesh
 * with mTLS, a cluster-internal provider). Whether plain http may name any host, the answer.
 */
function requireHttps(
  reader: Reader,
  production: boolean,
  names: readonly ("OIDC_ISSUER" | "JWKS_URL")[],
): boolean {
  const allow = reader.oneOf("JWT_PROVIDER_ALLOW_HTTP", ["true", "false"], "false") === "true";
  if (!production || allow) return true;
  for (const name of names) {
    const value = reader.raw(name);
    if (value === undefined) continue;
    let parsed: URL;
    try {
      parsed = new URL(value);
    } catch {
      continue;
    }
    if (parsed.protocol === "http:" && !isLoopbackHost(parsed.hostname.replace(/^\[|\]$/g, ""))) {
      reader.problems.push(
        `${name}: must be https in production (or JWT_PROVIDER_ALLOW_HTTP=true where the network protects the link)`,
      );
    }
  }
  return false;
}

/** The provider settings that name tiers of the policy. */
export type ProviderTiers = Pick<ProviderSettings, "defaultTier" | "tierClaim">;

/**
 * What a policy must hold for the provider settings: the tier EXTERNAL_DEFAULT_TIER names (without
 * it, every provider subject whose token names no known tier is refused) and every tier JWT_TIER_MAP
 * maps to (a typo there would give those subjects the default tier, silently). Checked at start, on
 * every reload and by `tollgate policy validate` alike, so that a policy one accepts the others do.
 */
export function providerTierProblems(provider: ProviderTiers, tiers: Iterable<string>): string[] {
  const known = new Set(tiers);
  const list = [...known].join(", ");
  const problems: string[] = [];
  if (!known.has(provider.defaultTier)) {
    problems.push(`EXTERNAL_DEFAULT_TIER: "${provider.defaultTier}" is not a tier of the policy (${list})`);
  }
  for (const [value, tier] of provider.tierClaim?.map ?? []) {
    if (!known.has(tier)) {
      problems.push(
        `JWT_TIER_MAP: ${value}=${tier} names "${tier}", which is not a tier of the policy (${list})`,
      );
    }
  }
  return problems;
}

function parseDefaultTier(reader: Reader): string {
  const defaultTier = reader.raw("EXTERNAL_DEFAULT_TIER") ?? "free";
  if (!TIER.test(defaultTier))
    reader.problems.push(`EXTERNAL_DEFAULT_TIER: "${defaultTier}" is not a tier name`);
  return defaultTier;
}

/**
 * The settings providerTierProblems checks a policy against, read as the server reads them, for
 * `tollgate policy validate`: undefined when the environment configures no provider and names no
 * tier (the server checks nothing then; a tier setting given alone says the operator means it).
 */
export function parseProviderTiers(reader: Reader): ProviderTiers | undefined {
  const names = ["OIDC_ISSUER", "JWKS_URL", "EXTERNAL_DEFAULT_TIER", "JWT_TIER_MAP"] as const;
  if (names.every((name) => reader.raw(name) === undefined)) return undefined;
  return { defaultTier: parseDefaultTier(reader), tierClaim: parseTierClaim(reader) };
}

const DEFAULT_CLOCK_TOLERANCE_SECONDS = 5;

/**
 * JWT_CLOCK_TOLERANCE_SECONDS: the leeway on `exp` and `nbf` for clocks that disagree, on tollgate's
 * own tokens and the provider's alike. Five minutes at most (Microsoft.IdentityModel's default):
 * past that a clock is wrong rather than skewed, and every token would outlive its `exp` by as much.
 */
export function parseClockTolerance(reader: Reader): number {
  return reader.int("JWT_CLOCK_TOLERANCE_SECONDS", DEFAULT_CLOCK_TOLERANCE_SECONDS, 0, 300);
}

export function parseIdentitySettings(
  reader: Reader,
  options: { production?: boolean; clockToleranceSeconds?: number } = {},
): IdentitySettings {
  const { production = false, clockToleranceSeconds = DEFAULT_CLOCK_TOLERANCE_SECONDS } = options;
  const apiKeyHeader = (reader.raw("API_KEY_HEADER") ?? "x-api-key").toLowerCase();
  if (!HEADER.test(apiKeyHeader) || apiKeyHeader === "authorization") {
    reader.problems.push(`API_KEY_HEADER: expected a header name (a-z 0-9 -) other than authorization`);
  } else if (RESERVED_HEADERS.has(apiKeyHeader)) {
    reader.problems.push(`API_KEY_HEADER: ${apiKeyHeader} is a header the proxy or tollgate sets itself`);
  }
  const forwardApiKey = reader.oneOf("API_KEY_FORWARD", ["true", "false"], "false") === "true";
  const issuerUrl = url(reader, "OIDC_ISSUER");
  const jwksUrl = url(reader, "JWKS_URL");
  const httpAnyHost = requireHttps(reader, production, ["OIDC_ISSUER", "JWKS_URL"]);
  const tierClaim = parseTierClaim(reader);
  const algorithms = parseProviderAlgorithms(reader);
  const defaultTier = parseDefaultTier(reader);
  const requireAtJwt = reader.oneOf("JWT_PROVIDER_REQUIRE_AT_JWT", ["true", "false"], "false") === "true";
  // 100,000 tokens of 4 KiB each: 400 MB of token text at most, already more than a sidecar should hold.
  const cacheSize = reader.int("JWT_PROVIDER_CACHE_SIZE", 10_000, 1, 100_000);
  const subjectClaim = reader.raw("JWT_SUBJECT_CLAIM") ?? "sub";
  if (!CLAIM.test(subjectClaim))
    reader.problems.push(`JWT_SUBJECT_CLAIM: "${subjectClaim}" is not a claim name`);
  if (issuerUrl !== undefined && jwksUrl !== undefined) {
    reader.problems.push("OIDC_ISSUER and JWKS_URL: set one of them, not both");
  }
  const configured = reader.raw("OIDC_ISSUER") !== undefined || reader.raw("JWKS_URL") !== undefined;
  if (!configured) return { provider: undefined, apiKeyHeader, forwardApiKey };
  const issuer = reader.raw("JWT_ISSUER");
  const audience = reader.raw("JWT_AUDIENCE");
  const audiences = audience?.split(",").map((s) => s.trim());
  if (audiences?.includes("")) reader.problems.push("JWT_AUDIENCE: expected <audience>,… with no empty item");
  if (issuer === undefined)
    reader.problems.push("JWT_ISSUER: required with OIDC_ISSUER or JWKS_URL (the provider tokens' iss)");
  if (audience === undefined)
    reader.problems.push("JWT_AUDIENCE: required with OIDC_ISSUER or JWKS_URL (the provider tokens' aud)");
  if (issuer === OWN_ISSUER) {
    reader.problems.push(
      `JWT_ISSUER: "${OWN_ISSUER}" is the issuer of tollgate's own tokens; give the provider's`,
    );
  }
  const source =
    issuerUrl !== undefined
      ? { kind: "oidc" as const, issuerUrl, httpAnyHost }
      : jwksUrl !== undefined
        ? { kind: "jwks" as const, url: jwksUrl }
        : undefined;
  if (source === undefined || issuer === undefined || audiences === undefined) {
    return { provider: undefined, apiKeyHeader, forwardApiKey };
  }
  return {
    provider: {
      source,
      issuer,
      audiences,
      algorithms,
      subjectClaim,
      tierClaim,
      defaultTier,
      requireAtJwt,
      cacheSize,
      clockToleranceSeconds,
    },
    apiKeyHeader,
    forwardApiKey,
  };
}
