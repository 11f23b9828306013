// The headers an API key came in, for the proxy to drop before the upstream: the key is tollgate's
// to read, and an upstream that logs its request headers would otherwise keep every client's
// secret. The identity headers tell the upstream who called (API_KEY_FORWARD=true keeps the key).
import type { CheckRequest } from "../check/checker.js";

/** Headers to remove, as a list (gRPC's headers_to_remove) and as one value (Envoy HTTP's header). */
export type RemovedHeaders = { names: readonly string[]; value: string };

/** Which of a check's headers carried an API key: undefined when none did. */
export type ApiKeyHeaders = (
  facts: Pick<CheckRequest, "authorization" | "apiKey">,
) => RemovedHeaders | undefined;

const A = "A".charCodeAt(0);
const a = "a".charCodeAt(0);
const SPACE = " ".charCodeAt(0);
const TAB = "\t".charCodeAt(0);
const SCHEME = "apikey";

/**
 * Whether Authorization's scheme is ApiKey, any case, followed by a space or a tab: credentials.ts
 * reads "ApiKey<tab>…" as its scheme too (a malformed key, refused unless the key header decides),
 * and what follows is a key all the same. Only such a header is sliced: a Bearer token costs nothing.
 */
function apiKeyScheme(auth: string | undefined): boolean {
  if (auth === undefined) return false;
  const first = auth.charCodeAt(0);
  if (first !== A && first !== a) return false;
  const after = auth.charCodeAt(SCHEME.length);
  return (after === SPACE || after === TAB) && auth.slice(0, SCHEME.length).toLowerCase() === SCHEME;
}

function removed(names: readonly string[]): RemovedHeaders {
  return { names, value: names.join(", ") };
}

/**
 * The API key header when it was sent (even beside a Bearer token that won over it: it is a secret
 * all the same), and Authorization when its scheme is ApiKey (apiKeyScheme).
 * The three answers are made once: an allowed check allocates nothing here.
 */
export function apiKeyHeaders(apiKeyHeader: string): ApiKeyHeaders {
  const header = removed([apiKeyHeader]);
  const authorization = removed(["authorization"]);
  const both = removed([apiKeyHeader, "authorization"]);
  return (facts) => {
    const inAuthorization = apiKeyScheme(facts.authorization);
    const inHeader = facts.apiKey !== undefined && facts.apiKey !== "";
    if (inHeader) return inAuthorization ? both : header;
    return inAuthorization ? authorization : undefined;
  };
}
