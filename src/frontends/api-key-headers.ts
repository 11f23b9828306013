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

function removed(names: readonly string[]): RemovedHeaders {
  return { names, value: names.join(", ") };
}

/**
 * The API key header when it was sent (even beside a Bearer token that won over it: it is a secret
 * all the same), and Authorization when its scheme is ApiKey (read as credentials.ts reads it).
 * The three answers are made once: an allowed check allocates nothing here.
 */
export function apiKeyHeaders(apiKeyHeader: string): ApiKeyHeaders {
  const header = removed([apiKeyHeader]);
  const authorization = removed(["authorization"]);
  const both = removed([apiKeyHeader, "authorization"]);
  return (facts) => {
    const auth = facts.authorization;
    const first = auth === undefined ? 0 : auth.charCodeAt(0);
    const inAuthorization =
      (first === A || first === a) && (auth as string).slice(0, 7).toLowerCase() === "apikey ";
    const inHeader = facts.apiKey !== undefined && facts.apiKey !== "";
    if (inHeader) return inAuthorization ? both : header;
    return inAuthorization ? authorization : undefined;
  };
}
