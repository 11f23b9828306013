// API_KEY_HEADER's rule as the proxies' renderers apply it (nginx/render.mjs, envoy/render.mjs):
// tollgate's own is in src/config/identity-settings.ts, and test/unit/api-key-header.test.ts holds
// the three to one answer.

const HEADER = /^[A-Za-z0-9-]{1,64}$/;

/**
 * Headers the proxies set on the check themselves, or tollgate sets for the upstream, or that frame
 * the request: copied from the client as the API key's header, the client would write them (with
 * API_KEY_HEADER=x-original-uri, nginx would send the client's own path beside the real one).
 */
export const RESERVED_HEADERS = [
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
];

/** Why `value` cannot be API_KEY_HEADER, to follow its name in a message; undefined when it can. */
export function apiKeyHeaderProblem(value) {
  if (!HEADER.test(value)) return "is not a header name (a-z 0-9 -) other than authorization";
  if (RESERVED_HEADERS.includes(value.toLowerCase())) {
    return "is a header the proxy or tollgate sets itself, not one for an API key";
  }
  return undefined;
}
