// The node:http server under each HTTP listener: Envoy's header limit, and JSON for requests node cannot parse.
import {
  createServer,
  type IncomingMessage,
  type RequestListener,
  type Server,
  type ServerResponse,
} from "node:http";
import type { Duplex } from "node:stream";

/**
 * Envoy accepts 60 KiB of request headers by default and forwards the Authorization header to the
 * check as is; node's own default (16 KiB) would answer a long token with a bodyless 431 instead of
 * tollgate's 401. nginx/'s configuration takes 60 KiB in all too, so that a check never exceeds this.
 */
export const MAX_HEADER_BYTES = 64 * 1024;

function rawJsonResponse(status: number, reason: string, message: string, withBody: boolean): string {
  const body = JSON.stringify({ error: "bad_request", message });
  const head = [
    `HTTP/1.1 ${status} ${reason}`,
    "Content-Type: application/json",
    `Content-Length: ${Buffer.byteLength(body)}`,
    "Connection: close",
  ].join("\r\n");
  return `${head}\r\n\r\n${withBody ? body : ""}`;
}

function answerFor(error: NodeJS.ErrnoException, withBody: boolean): string {
  switch (error.code) {
    case "HPE_HEADER_OVERFLOW":
      return rawJsonResponse(
        431,
        "Request Header Fields Too Large",
        "The request headers are too large",
        withBody,
      );
    case "ERR_HTTP_REQUEST_TIMEOUT":
      return rawJsonResponse(408, "Request Timeout", "The request took too long to arrive", withBody);
    default:
      return rawJsonResponse(400, "Bad Request", "The request is not valid HTTP/1.1", withBody);
  }
}

/** Node's default clientError answer, with a JSON body like every other tollgate error. */
function answerClientError(error: NodeJS.ErrnoException & { rawPacket?: Buffer }, socket: Duplex): void {
  const inFlight = (socket as Duplex & { _httpMessage?: { headersSent?: boolean } })._httpMessage;
  if (socket.writable && error.code !== "ECONNRESET" && inFlight?.headersSent !== true) {
    // An answer to HEAD has no body, even when the rest of the request could not be parsed.
    const head = error.rawPacket?.subarray(0, 5).toString("latin1") === "HEAD ";
    socket.write(answerFor(error, !head));
  }
  socket.destroy();
}

/**
 * An Expect other than 100-continue: node's own answer is a 417 with no body and no Content-Type;
 * this one says what went wrong, in JSON like every other error.
 */
function answerExpectation(req: IncomingMessage, res: ServerResponse): void {
  const body = JSON.stringify({ error: "bad_request", message: "Only Expect: 100-continue is supported" });
  res.writeHead(417, {
    "Content-Type": "application/json",
    "Content-Length": Buffer.byteLength(body),
    Connection: "close",
  });
  res.end(req.method === "HEAD" ? undefined : body);
}

/** CONNECT: tollgate is no proxy. Without this, node closes the connection without a word. */
function answerConnect(_req: IncomingMessage, socket: Duplex): void {
  socket.on("error", () => socket.destroy());
  socket.end(
    rawJsonResponse(400, "Bad Request", "CONNECT is not served here: tollgate is not a proxy", true),
  );
}

/**
 * How long a request's headers, and the whole request, may take to arrive (408 past it). A proxy
 * sends both at once; a client that trickles them (slowloris) held a connection and up to 64 KiB of
 * headers for 80 s, or a body for node's default of 5 minutes, and many such connections held
 * gigabytes. Node counts these from each request's first byte, so an idle keep-alive connection is
 * not cut by them (KEEP_ALIVE_MS governs it).
 */
export const HEADERS_TIMEOUT_MS = 10_000;
export const REQUEST_TIMEOUT_MS = 30_000;
/** How often node looks for requests past those timeouts (its default, 30 s, adds that much to each). */
const TIMEOUT_CHECK_MS = 1_000;
/** Longer than the proxies' idle upstream keep-alive, so they close first and never hit a closed socket. */
const KEEP_ALIVE_MS = 75_000;

export function createHttpServer(listener: RequestListener): Server {
  const server = createServer(
    {
      maxHeaderSize: MAX_HEADER_BYTES,
      headersTimeout: HEADERS_TIMEOUT_MS,
      requestTimeout: REQUEST_TIMEOUT_MS,
      connectionsCheckingInterval: TIMEOUT_CHECK_MS,
      keepAliveTimeout: KEEP_ALIVE_MS,
    },
    listener,
  );
  server.on("clientError", answerClientError);
  server.on("checkExpectation", answerExpectation);
  server.on("connect", answerConnect);
  return server;
}
