// Envoy's ext_authz HTTP service: any method on /ext_authz + the original path and query. Envoy
// allows on status 200 exactly and sends any other answer (status, headers, body) to the client.

import { requestIdOf } from "../process/request-id.js";
import { CLIENT_IP_HEADER, clientAddress } from "./client-ip.js";
import { type HttpCheckFrontEnd, header, MAX_URI, uriTooLong } from "./http-check.js";
import { renderDecision } from "./render.js";

/**
 * Envoy removes the headers named here (comma-separated) from the request before the upstream, on
 * a 200 only, whatever allowed_upstream_headers lists.
 */
const HEADERS_TO_REMOVE = "x-envoy-auth-headers-to-remove";

/** envoy.yaml's path_prefix. */
const PREFIX = "/ext_authz";

export const envoyHttp: HttpCheckFrontEnd = {
  protocol: "envoy",
  paths: [{ path: PREFIX, subpaths: true }],
  usage: `${PREFIX}/<path> (Envoy)`,
  facts(req, url, clientIp, apiKeyHeader) {
    const path = url.slice(PREFIX.length) || "/";
    if (path.length > MAX_URI) return uriTooLong();
    return {
      method: req.method,
      path: path.startsWith("/") ? path : `/${path}`,
      authorization: header(req, "authorization"),
      apiKey: header(req, apiKeyHeader),
      requestId: requestIdOf(req.headers["x-request-id"]),
      ip: clientAddress(
        {
          stated: header(req, CLIENT_IP_HEADER),
          forwardedFor: header(req, "x-forwarded-for"),
          peer: req.remoteAddress,
        },
        clientIp,
      ),
    };
  },
  render(decision, nowMs, removed) {
    const response = renderDecision(decision, nowMs);
    if (removed !== undefined) response.headers[HEADERS_TO_REMOVE] = removed.value;
    return response;
  },
};
