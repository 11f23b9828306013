// An HTTP check front end as the check listener serves it: the request targets it answers, the
// check's facts from one request, and its protocol's answer to a Decision.
import type { CheckRequest } from "../check/checker.js";
import type { Decision } from "../check/types.js";
import { wrongMethod } from "../http/methods.js";
import type { RemovedHeaders } from "./api-key-headers.js";
import type { ClientIpOptions } from "./client-ip.js";
import type { Protocol } from "./front-end.js";
import type { Exchange } from "./http1/exchange.js";
import type { Headers } from "./http1/head.js";
import type { CheckResponse } from "./render.js";

/** The longest original request target a check takes: a longer one is answered 414. */
export const MAX_URI = 8192;

/**
 * A request target a front end answers: `path` itself, with or without a query, and with
 * `subpaths` every path below it too (`/ext_authz/api/products?q=1`).
 */
export type PathMatcher = { path: string; subpaths: boolean };

/** What a front end reads of a request to the check listener. */
export type HttpCheckRequest = {
  method: string;
  headers: Headers;
  /** The proxy's address, as the connection has it. */
  remoteAddress: string | undefined;
};

export type HttpCheckFrontEnd = {
  protocol: Protocol;
  /** Its rows in the check listener's table of request targets. */
  paths: readonly PathMatcher[];
  /** Where its checks go, as the 404 for a request anywhere else names it. */
  usage: string;
  /** The check's facts, or the answer to a request no check can be made of (400, 414). */
  facts(
    req: HttpCheckRequest,
    url: string,
    clientIp: ClientIpOptions,
    apiKeyHeader: string,
  ): CheckRequest | CheckResponse;
  /**
   * The Decision as this protocol answers it: a new answer per call. `removed`: on an allow, the
   * headers that carried an API key, for a protocol that can ask its proxy to drop them.
   */
  render(decision: Decision, nowMs: number, removed?: RemovedHeaders): CheckResponse;
};

/**
 * A request target the check listener serves that is no check: it answers the request itself
 * (envoyproxy/ratelimit's `POST /json`).
 */
export type HttpRoute = {
  paths: readonly PathMatcher[];
  usage: string;
  /** Its requests' bodies are read whole before `serve` (exchange.body); a larger one is refused 413. */
  maxBodyBytes: number;
  serve(exchange: Exchange): void;
};

const SLASH = "/".charCodeAt(0);
const QUESTION_MARK = "?".charCodeAt(0);

/** Whether `matcher` answers `url`: one startsWith and one character, no regex per request. */
export function matchesPath(url: string, matcher: PathMatcher): boolean {
  if (!url.startsWith(matcher.path)) return false;
  if (url.length === matcher.path.length) return true;
  const next = url.charCodeAt(matcher.path.length);
  return next === QUESTION_MARK || (matcher.subpaths && next === SLASH);
}

/** A request header's value; a repeated header's values joined as one list. */
export function header(req: HttpCheckRequest, name: string): string | undefined {
  const value = req.headers[name];
  return Array.isArray(value) ? value.join(",") : value;
}

export function jsonAnswer(status: number, error: string, message: string): CheckResponse {
  return {
    status,
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ error, message }),
  };
}

/** 405 with Allow, or 204 with Allow for OPTIONS, as the public and admin APIs answer a method a path does not serve. */
export function methodAnswer(method: string, path: string, allowed: readonly string[]): CheckResponse {
  const answer = wrongMethod(method, path, allowed);
  return {
    status: answer.status,
    headers: {
      allow: answer.allow,
      ...(answer.body === undefined ? {} : { "content-type": "application/json" }),
    },
    body: answer.body === undefined ? "" : JSON.stringify(answer.body),
  };
}

export function uriTooLong(): CheckResponse {
  return jsonAnswer(414, "uri_too_long", `The request target is longer than ${MAX_URI} bytes`);
}
