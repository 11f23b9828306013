// The check listener on CHECK_PORT: the HTTP check front ends it is given (Envoy's /ext_authz/*,
// nginx's /nginx/auth), each at its paths. Every proxied request waits on this, so it is an HTTP/1.1
// server of tollgate's own (http1/) with a small table of path prefixes and no router in between.
import { performance } from "node:perf_hooks";
import type { CheckRequest } from "../check/checker.js";
import type { Decision } from "../check/types.js";
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
import type { Exchange } from "./http1/exchange.js";
import { http1Listener } from "./http1/server.js";
import type { Listener, ListenerAddress } from "./listener.js";
import type { CheckResponse } from "./render.js";
import { traceHeadersOf } from "./trace-headers.js";

/**
 * Body bytes held at once by all of the listener's unfinished requests whose bodies are read
 * (POST /json), as the gRPC listener bounds its own: without it, each connection trickling a body
 * just under its bound held a MiB until the request timed out, and a few thousand held gigabytes.
 */
export const MAX_HELD_BODY_BYTES = 64 * 1024 * 1024;

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
 * Answers sent together once the event loop's turn has read every ready socket (setImmediate),
 * instead of each inside its own socket's read. A check answered without waiting on the store (a
 * cached refusal, a 401) would otherwise be written while its client's next request is still
 * being read, one wake-up of the client and one turn per answer: measured, a cached refusal cost
 * 46 µs of CPU answered at once and 30 µs answered at the turn's end (docs/performance.md). The
 * wait is at most the rest of one turn, as for the store's corked writes.
 */
function createAnswerQueue(logger: CheckContext["logger"]) {
  let pending: [Exchange, CheckResponse][] = [];
  const flush = () => {
    const answers = pending;
    pending = [];
    // A second answer for one request (a failure after its answer was queued) is dropped by
    // respond: the first stands.
    for (const [exchange, response] of answers) {
      try {
        exchange.respond(response);
      } catch (error) {
        // One answer that cannot be written never holds back the others.
        logger.warn({ err: error }, "a check's answer could not be written");
      }
    }
  };
  return (exchange: Exchange, response: CheckResponse): void => {
    if (pending.length === 0) setImmediate(flush);
    pending.push([exchange, response]);
  };
}

function createCheckHandler(context: CheckContext, frontEnds: readonly (HttpCheckFrontEnd | HttpRoute)[]) {
  const { checker, clientIp, logger, onDecision, apiKeyHeader, apiKeyHeaders, tracing } = context;
  const answer = createAnswerQueue(logger);
  const routes = routeTable(frontEnds);
  const elsewhere = `Checks go to ${frontEnds.map((frontEnd) => frontEnd.usage).join(" or ")}`;

  const decided = (
    exchange: Exchange,
    frontEnd: HttpCheckFrontEnd,
    facts: CheckRequest,
    started: number,
    decision: Decision,
  ) => {
    const removed = decision.kind === "allow" ? apiKeyHeaders?.(facts) : undefined;
    answer(exchange, frontEnd.render(decision, Date.now(), removed));
    const seconds = (performance.now() - started) / 1000;
    onDecision?.(frontEnd.protocol, decision, seconds, facts.ip, facts.requestId);
  };

  /** Answers at once when the checker decides without the store (a cached refusal): no promise, no async frame. */
  const check = (req: Exchange, frontEnd: HttpCheckFrontEnd, url: string): Promise<void> | undefined => {
    // performance.now(), not hrtime.bigint(): a double, where each bigint is an allocation.
    const started = performance.now();
    const facts = frontEnd.facts(req, url, clientIp, apiKeyHeader);
    if ("status" in facts) {
      answer(req, facts);
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
    if (decision instanceof Promise) return decision.then((d) => decided(req, frontEnd, facts, started, d));
    decided(req, frontEnd, facts, started, decision);
    return undefined;
  };

  const serve = (req: Exchange): void => {
    const url = req.url;
    const route = findRoute(routes, url);
    if (route !== undefined && "serve" in route.frontEnd) {
      route.frontEnd.serve(req);
      return;
    }
    // Any body (Envoy's with_request_body) is not needed: the server drops it as it arrives.
    if (route === undefined) {
      if (!matchesPath(url, HEALTH)) {
        req.respond(jsonAnswer(404, "not_found", elsewhere));
      } else if (req.method === "GET" || req.method === "HEAD") {
        req.respond({
          status: 200,
          headers: { "content-type": "application/json" },
          body: '{"status":"ok"}',
        });
      } else {
        req.respond(methodAnswer(req.method, "/health", ["GET"]));
      }
      return;
    }
    const failed = (error: unknown) => {
      logger.error(
        { err: error, requestId: requestIdOf(req.headers["x-request-id"]) },
        "check failed unexpectedly",
      );
      if (!req.answered) answer(req, jsonAnswer(503, "unavailable", "The check could not be completed"));
    };
    try {
      check(req, route.frontEnd as HttpCheckFrontEnd, url)?.catch(failed);
    } catch (error) {
      failed(error);
    }
  };
  return {
    serve,
    /** Only a route that answers itself (POST /json) reads bodies; a check's is dropped. */
    wantsBody: (url: string) => {
      const route = findRoute(routes, url);
      return route !== undefined && "serve" in route.frontEnd;
    },
    maxBodyBytes: Math.max(0, ...frontEnds.map((f) => ("serve" in f ? f.maxBodyBytes : 0))),
    maxHeldBytes: MAX_HELD_BODY_BYTES,
    onError: (error: unknown) =>
      logger.error({ err: error }, "the check listener could not answer a request"),
  };
}

export function createCheckListener(
  address: ListenerAddress,
  context: CheckContext,
  frontEnds: readonly (HttpCheckFrontEnd | HttpRoute)[],
): Listener {
  return http1Listener(address, createCheckHandler(context, frontEnds));
}
