// An OIDC discovery document read for the one thing tollgate takes from it, the JWKS address: only
// from a document that names the configured issuer exactly, and only an address the settings let
// tollgate fetch keys from.
import { isLoopbackHost } from "../config/hosts.js";
import type { ProviderSettings } from "../config/identity-settings.js";
import { shownUrl } from "./provider-fetch.js";

/**
 * OIDC_ISSUER as an error shows it: as written, so that a trailing slash shows, unless it carries a
 * query or fragment (no issuer does, and one might hold a key).
 */
export function shownIssuer(issuerUrl: string): string {
  return /[?#]/.test(issuerUrl) ? shownUrl(issuerUrl) : issuerUrl;
}

type OidcSource = Extract<ProviderSettings["source"], { kind: "oidc" }>;

/**
 * Whether a discovery document may send tollgate to a plain-http jwks_uri: only when the issuer
 * itself is plain http (a test, a local provider, a sidecar), and then on a loopback host unless
 * the settings allow http on any (outside production, or JWT_PROVIDER_ALLOW_HTTP=true): a sidecar
 * on 127.0.0.1 in production must not name keys on another host over plain http.
 */
function httpAllowed(source: OidcSource, jwksUri: URL): boolean {
  if (new URL(source.issuerUrl).protocol !== "http:") return false;
  return source.httpAnyHost || isLoopbackHost(jwksUri.hostname.replace(/^\[|\]$/g, ""));
}

/**
 * The JWKS address a discovery document names, checked: the document must name the configured
 * issuer, exactly (OpenID Connect Discovery 1.0, section 4.3: a trailing slash counts), and its keys
 * must come over https unless httpAllowed says otherwise, so that a document cannot send tollgate to
 * keys of anyone's choosing (a data: URL, another scheme, plain http across the network).
 */
export function jwksUriOf(body: unknown, source: OidcSource): string {
  const { issuerUrl } = source;
  const doc = (body ?? {}) as { issuer?: unknown; jwks_uri?: unknown };
  if (typeof doc.issuer !== "string") {
    throw new Error(
      `the discovery document names no issuer (OIDC_ISSUER is ${JSON.stringify(shownIssuer(issuerUrl))})`,
    );
  }
  if (doc.issuer !== issuerUrl) {
    throw new Error(
      `the discovery document names the issuer ${JSON.stringify(doc.issuer).slice(0, 200)}, not OIDC_ISSUER ${JSON.stringify(shownIssuer(issuerUrl))}; they must match exactly (a trailing slash counts)`,
    );
  }
  const uri = doc.jwks_uri;
  if (typeof uri !== "string") throw new Error("the discovery document has no jwks_uri");
  let parsed: URL;
  try {
    parsed = new URL(uri);
  } catch {
    throw new Error("the discovery document's jwks_uri is not a URL");
  }
  if (parsed.protocol === "https:" || (parsed.protocol === "http:" && httpAllowed(source, parsed))) {
    return uri;
  }
  if (parsed.protocol !== "http:") {
    throw new Error(`the discovery document's jwks_uri must be https, not ${parsed.protocol}`);
  }
  throw new Error(
    new URL(issuerUrl).protocol === "http:"
      ? "the discovery document's jwks_uri must be https, or http on a loopback host, in production (or JWT_PROVIDER_ALLOW_HTTP=true where the network protects the link)"
      : "the discovery document's jwks_uri must be https, as OIDC_ISSUER is",
  );
}
