// The logger of one API request: the process's, with the request's x-request-id on every line
// (a pino child) when the caller sent one. Passed down explicitly, so that no request context is
// carried through the process's asynchronous work.
import type { IncomingMessage } from "node:http";
import type { Logger } from "../process/logger.js";
import { requestIdOf } from "../process/request-id.js";

export function requestLogger(logger: Logger, req: IncomingMessage): Logger {
  const requestId = requestIdOf(req.headers["x-request-id"]);
  return requestId === undefined ? logger : logger.child({ requestId });
}

/** What express leaves on a request it routed: the router's mount path and the matched route. */
type Routed = IncomingMessage & { baseUrl?: string; route?: { path?: unknown } };

/**
 * The route template (`/admin/users/:id/sessions/:sid`), never the path itself, which holds ids, a
 * whole session id or a provider subject (a person's address); undefined for a request no route took.
 * Read while the route runs: express restores `baseUrl` as an error leaves each router.
 */
export function routeOf(req: Routed): string | undefined {
  const path = req.route?.path;
  return typeof path === "string" ? `${req.baseUrl ?? ""}${path}` : undefined;
}
