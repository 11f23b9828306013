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
