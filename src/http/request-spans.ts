// With tracing on, each request of the public and admin APIs in a server span named by its route
// (`POST /auth/login`, `PUT /admin/users/:id/tier`) whose store calls are children. Off, the APIs
// are served as they are.
import type { IncomingMessage, ServerResponse } from "node:http";
import {
  ATTR_HTTP_REQUEST_METHOD,
  ATTR_HTTP_RESPONSE_STATUS_CODE,
  ATTR_HTTP_ROUTE,
} from "@opentelemetry/semantic-conventions";
import { traceHeadersOf } from "../frontends/trace-headers.js";
import { requestIdOf } from "../process/request-id.js";
import { REQUEST_ID } from "../tracing/check-span.js";
import type { SpanAttributes, SpanHandle, Tracing } from "../tracing/tracing.js";
import type { HttpHandler } from "./http-listener.js";
import { routeOf } from "./request-log.js";

/** The response's end: finished, or the connection closed before. */
const answered = (res: ServerResponse): Promise<void> =>
  new Promise((resolve) => {
    res.once("close", resolve);
  });

function describe(span: SpanHandle | undefined, req: IncomingMessage, res: ServerResponse): void {
  if (span === undefined) return;
  const route = routeOf(req);
  const method = req.method ?? "GET";
  span.rename(route === undefined ? method : `${method} ${route}`);
  const attributes: SpanAttributes = { [ATTR_HTTP_RESPONSE_STATUS_CODE]: res.statusCode };
  if (route !== undefined) attributes[ATTR_HTTP_ROUTE] = route;
  span.setAttributes(attributes);
  if (res.statusCode >= 500) span.fail(`answered ${res.statusCode}`);
}

/**
 * `handler` with a span per request, when tracing is on; `handler` itself otherwise.
 * `traced(path)`: whether a request to this path gets a span (not the health checks and scrapes,
 * which would drown the traces that matter).
 */
export function withRequestSpans(
  handler: HttpHandler,
  options: { tracing: Tracing | undefined; traced(path: string): boolean },
): HttpHandler {
  const { tracing } = options;
  if (tracing === undefined) return handler;
  return (req, res) => {
    const url = req.url ?? "/";
    if (!options.traced(url.split("?", 1)[0] as string)) {
      handler(req, res);
      return;
    }
    const method = req.method ?? "GET";
    const attributes: SpanAttributes = { [ATTR_HTTP_REQUEST_METHOD]: method };
    const requestId = requestIdOf(req.headers["x-request-id"]);
    if (requestId !== undefined) attributes[REQUEST_ID] = requestId;
    void tracing.serveAcrossAwaits(method, traceHeadersOf(req.headers), attributes, (span) => {
      const done = answered(res).then(() => describe(span, req, res));
      handler(req, res);
      return done;
    });
  };
}
