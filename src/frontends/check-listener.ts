// The check listener on CHECK_PORT: Envoy ext_authz (/ext_authz/*) and nginx auth_request (/nginx/auth).
// Every proxied request waits on this, so it is plain node:http with no router in between.
import type { IncomingMessage, Server, ServerResponse } from "node:http";
import type { Checker } from "../check/checker.js";
import type { Decision } from "../check/types.js";
import type { Logger } from "../process/logger.js";
import { CLIENT_IP_HEADER, type ClientIpOptions, clientAddress } from "./client-ip.js";
import type { Protocol } from "./front-end.js";
import { type CheckResponse, forNginx, renderDecision, renderForNginx } from "./render.js";
import { createHttpServer } from "./server.js";

export type CheckListenerOptions = {
  checker: Checker;
  clientIp: ClientIpOptions;
  logger: Logger;
  /** Called once per answered check, for metrics and logs. */
  onDecision?(protocol: Protocol, decision: Decision, seconds: number, ip: string): void;
};

const ENVOY_PREFIX = "/ext_authz";
const NGINX_PATH = "/nginx/auth";
const MAX_URI = 8192;

function send(res: ServerResponse, response: CheckResponse): void {
  // A known length (not chunked): nginx reuses an auth_request connection only when it can tell the
  // body is complete, and without it opens a new TCP connection for every check.
  response.headers["content-length"] = String(Buffer.byteLength(response.body));
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

function jsonResponse(status: number, error: string, message: string): CheckResponse {
  return {
    status,
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ error, message }),
  };
}

function sendJson(res: ServerResponse, status: number, error: string, message: string): void {
  send(res, jsonResponse(status, error, message));
}

const header = (req: IncomingMessage, name: string): string | undefined => {
  const value = req.headers[name];
  return Array.isArray(value) ? value.join(",") : value;
};

export function createCheckHandler(options: CheckListenerOptions) {
  const { checker, logger, onDecision } = options;

  const clientAddressOf = (req: IncomingMessage, protocol: Protocol): string =>
    clientAddress(
      {
        stated: protocol === "envoy" ? header(req, CLIENT_IP_HEADER) : undefined,
        forwardedFor: header(req, "x-forwarded-for"),
        peer: req.socket.remoteAddress,
      },
      options.clientIp,
    );

  const answer = async (
    req: IncomingMessage,
    res: ServerResponse,
    protocol: Protocol,
    method: string,
    path: string,
  ): Promise<void> => {
    const started = process.hrtime.bigint();
    const ip = clientAddressOf(req, protocol);
    const decision = await checker({ method, path, authorization: header(req, "authorization"), ip });
    const now = Date.now();
    send(res, protocol === "envoy" ? renderDecision(decision, now) : renderForNginx(decision, now));
    onDecision?.(protocol, decision, Number(process.hrtime.bigint() - started) / 1e9, ip);
  };

  return (req: IncomingMessage, res: ServerResponse): void => {
    // Any body (Envoy's with_request_body) is not needed: drain it so keep-alive continues.
    req.resume();
    const url = req.url ?? "/";
    let work: Promise<void> | undefined;
    if (
      url.startsWith(ENVOY_PREFIX) &&
      (url.length === ENVOY_PREFIX.length ||
        url.charCodeAt(ENVOY_PREFIX.length) === 47 ||
        url.charCodeAt(ENVOY_PREFIX.length) === 63)
    ) {
      const path = url.slice(ENVOY_PREFIX.length) || "/";
      if (path.length > MAX_URI) {
        sendJson(res, 414, "uri_too_long", `The request target is longer than ${MAX_URI} bytes`);
        return;
      }
      work = answer(req, res, "envoy", req.method ?? "GET", path.startsWith("/") ? path : `/${path}`);
    } else if (url === NGINX_PATH || url.startsWith(`${NGINX_PATH}?`)) {
      const method = header(req, "x-original-method");
      const uri = header(req, "x-original-uri");
      if (method === undefined || uri === undefined) {
        // Only a direct caller can get here: nginx always sends both.
        sendJson(res, 400, "bad_request", "nginx checks need X-Original-Method and X-Original-URI");
        return;
      }
      if (uri.length > MAX_URI) {
        // A real 414 through nginx (auth_request turns any 4xx but 401 and 403 into a 500); the body
        // stays for direct callers, nginx never reads it.
        const tooLong = jsonResponse(
          414,
          "uri_too_long",
          `The request target is longer than ${MAX_URI} bytes`,
        );
        send(res, { ...forNginx(tooLong), body: tooLong.body });
        return;
      }
      work = answer(req, res, "nginx", method, uri);
    } else if (url === "/health" && req.method === "GET") {
      send(res, { status: 200, headers: { "content-type": "application/json" }, body: '{"status":"ok"}' });
      return;
    } else {
      sendJson(res, 404, "not_found", "Checks go to /ext_authz/<path> (Envoy) or /nginx/auth (nginx)");
      return;
    }
    work.catch((error: unknown) => {
      logger.error({ err: error }, "check failed unexpectedly");
      if (!res.headersSent) sendJson(res, 503, "unavailable", "The check could not be completed");
    });
  };
}

export function createCheckServer(options: CheckListenerOptions): Server {
  return createHttpServer(createCheckHandler(options));
}
