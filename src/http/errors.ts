// Error codes, their HTTP statuses and bodies, in one place. Handlers never leak internal messages.
import express, { type ErrorRequestHandler, type RequestHandler, type Response } from "express";
import { reservedKeyProblems } from "../policy/reserved-keys.js";
import type { Logger } from "../process/logger.js";
import { StoreUnavailableError } from "../store/failure.js";
import { bodyText, duplicateKey } from "./duplicate-keys.js";
import { requestLogger } from "./request-log.js";

export const STATUS = {
  bad_request: 400,
  invalid_json: 400,
  unauthorized: 401,
  forbidden: 403,
  not_found: 404,
  method_not_allowed: 405,
  conflict: 409,
  payload_too_large: 413,
  unsupported_media_type: 415,
  invalid_policy: 422,
  rate_limit_exceeded: 429,
  internal_error: 500,
  unavailable: 503,
  reload_incomplete: 503,
} as const;

export type ErrorCode = keyof typeof STATUS;

export class HttpError extends Error {
  readonly code: ErrorCode;
  readonly headers: Record<string, string>;
  /** More fields of the JSON body (e.g. a policy's problems). */
  readonly details: Record<string, unknown>;
  constructor(
    code: ErrorCode,
    message: string,
    headers: Record<string, string> = {},
    details: Record<string, unknown> = {},
  ) {
    super(message);
    this.name = "HttpError";
    this.code = code;
    this.headers = headers;
    this.details = details;
  }
}

export const errorBody = (code: ErrorCode, message: string) => ({ error: code, message });

/** At most `max` characters of a client's key, name or path, as an error message repeats it. */
export const shown = (text: string, max = 64): string =>
  text.length <= max ? text : `${text.slice(0, max)}…`;

/** RFC 6750 challenge; no `error` attribute when the request carried no token. */
export function bearerChallenge(description: string | undefined): string {
  if (description === undefined) return 'Bearer realm="tollgate"';
  return `Bearer realm="tollgate", error="invalid_token", error_description="${description.replace(/["\\]/g, "")}"`;
}

export function sendError(res: Response, error: HttpError): void {
  res
    .status(STATUS[error.code])
    .set(error.headers)
    .json({ ...errorBody(error.code, error.message), ...error.details });
}

type BodyParserError = Error & { type?: string; status?: number };

/**
 * Maps anything thrown in a handler to a JSON error: 4xx for bad input, 503 for the store. A line
 * it logs names the route (handlers.ts's handle), never the path, which holds a session id or a
 * provider subject.
 */
export function errorHandler(processLogger: Logger): ErrorRequestHandler {
  return (error: unknown, req, res, _next) => {
    if (res.headersSent) return;
    const logger = requestLogger(processLogger, req);
    if (error instanceof HttpError) return sendError(res, error);
    if (error instanceof StoreUnavailableError) {
      logger.warn(
        { event: "store_error", route: res.locals.route, err: (error.cause as Error)?.message },
        "store unavailable",
      );
      return sendError(
        res,
        new HttpError("unavailable", "The session store is unavailable; try again shortly"),
      );
    }
    const parser = error as BodyParserError;
    switch (parser.type) {
      case "entity.parse.failed":
        return sendError(res, new HttpError("invalid_json", "The request body is not valid JSON"));
      case "entity.too.large":
        return sendError(res, new HttpError("payload_too_large", "The request body is too large"));
      case "charset.unsupported":
      case "encoding.unsupported":
        return sendError(res, new HttpError("unsupported_media_type", "Unsupported body encoding"));
      default:
        if (typeof parser.status === "number" && parser.status >= 400 && parser.status < 500) {
          return sendError(res, new HttpError("bad_request", "The request could not be read"));
        }
    }
    logger.error({ err: error, route: res.locals.route }, "unhandled error");
    return sendError(res, new HttpError("internal_error", "Internal error"));
  };
}

/** A body was sent: RFC 9112 frames one by Transfer-Encoding or a Content-Length above 0. */
const bodySent = (req: Parameters<RequestHandler>[0]): boolean =>
  req.headers["transfer-encoding"] !== undefined || Number(req.headers["content-length"] ?? 0) > 0;

/**
 * The media types read as JSON: application/json and the +json ones (RFC 6839), parameters aside.
 * One list for the check below and for the parser: a type that passed the check but that the parser
 * skipped would leave a body it was sent unread, answered "A JSON body is required".
 */
const JSON_TYPES = ["application/json", "application/*+json"];

/**
 * POST/PUT bodies must be JSON; anything else is refused before parsing. A body with no Content-Type
 * at all is refused the same way: express.json leaves it unread, and the route's schema would then
 * blame an absent object ("received undefined") for what is the client's missing header.
 */
const requireJson: RequestHandler = (req, _res, next) => {
  if ((req.method === "POST" || req.method === "PUT" || req.method === "PATCH") && bodySent(req)) {
    if (req.headers["content-type"] === undefined || req.is(JSON_TYPES) === false) {
      return next(new HttpError("unsupported_media_type", "Send the body as application/json"));
    }
  }
  next();
};

/** The largest JSON body a route reads. */
const MAX_JSON_BODY_BYTES = 16 * 1024;

/**
 * A body announced larger than a route reads is refused at once: the parser would first read (and
 * drop) all of it, so that the answer to `Content-Length: 100000000` waited for 100 MB, or for the
 * request timeout. What follows is still read and dropped (node does so once the answer is out,
 * within REQUEST_TIMEOUT_MS): closing at once would reset the connection under a client still
 * sending, and a proxy would answer 502 instead of this 413.
 */
const refuseAnnouncedOversize: RequestHandler = (req, _res, next) => {
  const announced = Number(req.headers["content-length"] ?? 0);
  next(
    announced > MAX_JSON_BODY_BYTES
      ? new HttpError("payload_too_large", "The request body is too large")
      : undefined,
  );
};

/** No body at all (or an empty one of another type) where a route reads one: said so, not "undefined". */
const requireBody: RequestHandler = (req, _res, next) => {
  next(req.body === undefined ? new HttpError("bad_request", "A JSON body is required") : undefined);
};

/**
 * "__proto__", "constructor" and "prototype" as keys, at any depth, are a 400 naming the field, like
 * any other bad key: zod drops "__proto__" from a record and from a plain object without a word, so
 * a schema alone would answer 200 for a body it half ignored. (JSON.parse makes them plain own
 * fields, so parsing pollutes nothing; this keeps any later copy or merge from doing so either.)
 */
const refuseReservedKeys: RequestHandler = (req, _res, next) => {
  const [problem] = reservedKeyProblems(req.body, 1);
  next(problem === undefined ? undefined : new HttpError("bad_request", problem));
};

/**
 * A key written twice in one object is refused before parsing: JSON.parse would keep the last
 * without a word (`{"tier":"free","tier":"enterprise"}`), where another reader of the same bytes may
 * take the first. A body that is not JSON, or not in its charset, is left to the parser to report.
 */
function refuseDuplicateKeys(_req: unknown, _res: unknown, buf: Buffer, charset: string): void {
  const text = bodyText(buf, charset);
  const key = text === undefined ? undefined : duplicateKey(text);
  if (key !== undefined) {
    throw new HttpError("bad_request", `duplicate key ${JSON.stringify(shown(key))}: give each key once`);
  }
}

/**
 * For the routes that read a body, and only those: a JSON object or array (`strict`) of at most
 * 16 kB, without duplicate or reserved keys. A route that reads none (logout, a revocation, a reload) answers
 * whatever a client sends along, as it ignores it.
 */
export const jsonBody: RequestHandler[] = [
  requireJson,
  refuseAnnouncedOversize,
  express.json({ limit: MAX_JSON_BODY_BYTES, strict: true, type: JSON_TYPES, verify: refuseDuplicateKeys }),
  requireBody,
  refuseReservedKeys,
];
