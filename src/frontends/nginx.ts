// nginx's auth_request: location /nginx/auth on the check listener, the original method and URI in
// X-Original-Method and X-Original-URI. auth_request passes only 2xx, 401 and 403, so every other
// status travels in headers that nginx/ turns back into the real answer.
import type { Decision } from "../check/types.js";
import { requestIdOf } from "../process/request-id.js";
import { clientAddress } from "./client-ip.js";
import { type HttpCheckFrontEnd, header, jsonAnswer, MAX_URI, uriTooLong } from "./http-check.js";
import { type CheckResponse, renderDecision } from "./render.js";

const PATH = "/nginx/auth";

/**
 * Any check answer, reshaped for auth_request: a 400, 414, 429 or 503 becomes 403 with the real
 * status in X-Authz-Status, and every denial carries its JSON body in X-Authz-Body for nginx to
 * send. auth_request never reads a body, so none is sent: an empty one keeps the connection
 * reusable. A new answer: the one given stays as it was.
 */
export function forNginx(response: CheckResponse): CheckResponse {
  if (response.status === 200) return response;
  return {
    status: response.status === 401 ? 401 : 403,
    headers: {
      ...response.headers,
      "x-authz-status": String(response.status),
      "x-authz-body": response.body,
    },
    body: "",
  };
}

export function renderForNginx(decision: Decision, nowMs: number): CheckResponse {
  return forNginx(renderDecision(decision, nowMs));
}

export const nginx: HttpCheckFrontEnd = {
  protocol: "nginx",
  paths: [{ path: PATH, subpaths: false }],
  usage: `${PATH} (nginx)`,
  facts(req, _url, clientIp, apiKeyHeader) {
    const method = header(req, "x-original-method");
    const uri = header(req, "x-original-uri");
    if (method === undefined || uri === undefined) {
      // Only a direct caller can get here: nginx always sends both.
      return jsonAnswer(400, "bad_request", "nginx checks need X-Original-Method and X-Original-URI");
    }
    if (uri.length > MAX_URI) {
      // A real 414 through nginx (auth_request turns any 4xx but 401 and 403 into a 500); the body
      // stays for direct callers, nginx never reads it.
      const tooLong = uriTooLong();
      return { ...forNginx(tooLong), body: tooLong.body };
    }
    return {
      method,
      path: uri,
      authorization: header(req, "authorization"),
      apiKey: header(req, apiKeyHeader),
      requestId: requestIdOf(req.headers["x-request-id"]),
      ip: clientAddress({ forwardedFor: header(req, "x-forwarded-for"), peer: req.remoteAddress }, clientIp),
    };
  },
  render: renderForNginx,
};
