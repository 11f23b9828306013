// The check listener on CHECK_PORT: the HTTP check front ends it is given (Envoy's /ext_authz/*,
// nginx's /nginx/auth), each at its paths. Every proxied request waits on this, so it is plain
// node:http with a small table of path prefixes and no router in between.
import type { IncomingMessage, ServerResponse } from "node:http";
import { performance } from "node:perf_hooks";
import type { CheckRequest } from "../check/checker.js";
import type { Decision } from "../check/types.js";
import { httpListener } from "../http/http-listener.js";
import { requestIdOf } from "../process/request-id.js";
import { tracedCheck } from "../tracing/check-span.js";
import type { CheckContext } from "./front-end.js";
import {
  type HttpCheckFrontEnd,
  type HttpRoute,
  jsonAnswer,
  matchesPath,
  methodAnswer,
  type PathMatcher,
} from "./http-check.js";
import type { Listener, ListenerAddress } from "./listener.js";
import type { CheckResponse } from "./render.js";
import { traceHeadersOf } from "./trace-headers.js";

type Route = PathMatcher & { frontEnd: HttpCheckFrontEnd | HttpRoute };

/** The listener's own liveness probe, for GET and HEAD (with or without a query, as the APIs take it). */
const HEALTH: PathMatcher = { path: "/health", subpaths: false };

/** The table of request targets: every path of every front end, in the order they are given. */
function routeTable(frontEnds: readonly (HttpCheckFrontEnd | HttpRoute)[]): readonly Route[] {
  return frontEnds.flatMap((frontEnd) => frontEnd.paths.map((path) => ({ ...path, frontEnd })));
}

function findRoute(routes: readonly Route[], url: string): Route | undefined {
  for (const route of routes) if (matchesPath(url, route)) return route;
  return undefined;
}

/**
 * Writes an answer rendered for this request alone, so its length is added to its own headers in
 * place rather than to a copy of them.
 */
function send(res: ServerResponse, response: CheckResponse): void {
  // A known length (not chunked): nginx reuses an auth_request connection only when it can tell the
  // body is complete, and without it opens a new TCP connection for every check.
  // (No length at all on a 204, which has no body: RFC 9110 section 8.6.)
  if (response.status !== 204) response.headers["content-length"] = String(Buffer.byteLength(response.body));
  res.writeHead(response.status, response.headers);
  if (response.body === "") {
    res.end();
    return;
  }
  // end(body) would queue the head with the body and then an empty chunk, sent together by the
  // slower writev path; writing the body and flushing it first sends head and body in one plain
  // write (a 429 is the answer a limiter sends most often after its allows). A pipelined answer
  // that waits for the one before it has no socket yet and is sent by node:http in order, as before.
  res.write(response.body);
  res.socket?.uncork();
  res.end();
}

/**
 * Answers sent together once the event loop's turn has read every ready socket (setImmediate),
 * instead of each inside its own socket's read. A check answered without waiting on the store (a
 * cached refusal, a 401) would otherwise be written while its client's next request is still
 * being read, one wake-up of the client and one turn per answer: measured, a cached refusal cost
 * 46 µs of CPU answered at once and 30 µs answered at the turn's end (docs/performance.md). The
 * wait is at most the rest of one turn, as for the store's corked writes.
 */
function createAnswerQueue(logger: CheckContext["logger"]) {
  let pending: [ServerResponse, CheckResponse][] = [];
  const flush = () => {
    const answers = pending;
    pending = [];
    for (const [res, response] of answers) {
      // A second answer for one request (a failure after its answer was queued) is dropped: the first stands.
      if (res.headersSent) continue;
      try {
        send(res, response);
      } catch (error) {
        // One answer that cannot be written (its client gone) never holds back the others.
        logger.warn({ err: error }, "a check's answer could not be written");
      }
    }
  };
  return (res: ServerResponse, response: CheckResponse): void => {
    if (pending.length === 0) setImmediate(flush);
    pending.push([res, response]);
  };
}

function createCheckHandler(context: CheckContext, frontEnds: readonly (HttpCheckFrontEnd | HttpRoute)[]) {
  const { checker, clientIp, logger, onDecision, apiKeyHeader, apiKeyHeaders, tracing } = context;
  const answer = createAnswerQueue(logger);
  const routes = routeTable(frontEnds);
  const elsewhere = `Checks go to ${frontEnds.map((frontEnd) => frontEnd.usage).join(" or ")}`;

  const decided = (
    res: ServerResponse,
    frontEnd: HttpCheckFrontEnd,
    facts: CheckRequest,
    started: number,
    decision: Decision,
  ) => {
    const removed = decision.kind === "allow" ? apiKeyHeaders?.(facts) : undefined;
    answer(res, frontEnd.render(decision, Date.now(), removed));
    const seconds = (performance.now() - started) / 1000;
    onDecision?.(frontEnd.protocol, decision, seconds, facts.ip, facts.requestId);
  };

  /** Answers at once when the checker decides without the store (a cached refusal): no promise, no async frame. */
  const check = (
    req: IncomingMessage,
    res: ServerResponse,
    frontEnd: HttpCheckFrontEnd,
    url: string,
  ): Promise<void> | undefined => {
    // performance.now(), not hrtime.bigint(): a double, where each bigint is an allocation.
    const started = performance.now();
    const facts = frontEnd.facts(req, url, clientIp, apiKeyHeader);
    if ("status" in facts) {
      answer(res, facts);
      return undefined;
    }
    const decision =
      tracing === undefined
        ? checker(facts)
        : tracedCheck(
            tracing,
            {
              protocol: frontEnd.protocol,
              caller: traceHeadersOf(req.headers),
              requestId: facts.requestId,
              method: facts.method,
            },
            () => checker(facts),
          );
    if (decision instanceof Promise) return decision.then((d) => decided(res, frontEnd, facts, started, d));
    decided(res, frontEnd, facts, started, decision);
    return undefined;
  };

  return (req: IncomingMessage, res: ServerResponse): void => {
    const url = req.url ?? "/";
    const route = findRoute(routes, url);
    if (route !== undefined && "serve" in route.frontEnd) {
      route.frontEnd.serve(req, res);
      return;
    }
    // Any body (Envoy's with_request_body) is not needed: drain it so keep-alive continues.
    req.resume();
    if (route === undefined) {
      if (!matchesPath(url, HEALTH)) {
        send(res, jsonAnswer(404, "not_found", elsewhere));
      } else if (req.method === "GET" || req.method === "HEAD") {
        send(res, { status: 200, headers: { "content-type": "application/json" }, body: '{"status":"ok"}' });
      } else {
        send(res, methodAnswer(req.method ?? "", "/health", ["GET"]));
      }
      return;
    }
    const failed = (error: unknown) => {
      logger.error(
        { err: error, requestId: requestIdOf(req.headers["x-request-id"]) },
        "check failed unexpectedly",
      );
      if (!res.headersSent) answer(res, jsonAnswer(503, "unavailable", "The check could not be completed"));
    };
    try {
      check(req, res, route.frontEnd as HttpCheckFrontEnd, url)?.catch(failed);
    } catch (error) {
      failed(error);
    }
  };
}

export function createCheckListener(
  address: ListenerAddress,
  context: CheckContext,
  frontEnds: readonly (HttpCheckFrontEnd | HttpRoute)[],
): Listener {
  return httpListener(address, createCheckHandler(context, frontEnds));
}
