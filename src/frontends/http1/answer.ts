// An HTTP/1.1 answer as bytes: the status line, the headers given, the length, Date and the
// connection's fate, and the body, in one string written at once (one write syscall).
import { STATUS_CODES } from "node:http";
import { FORBIDDEN, headerName } from "./head.js";

/** What a route answers: the status, its headers (lower-case names) and the body. */
export type Answer = { status: number; headers: Record<string, string>; body: string };

/** How the answer ends its connection's request: kept open (1.1, or 1.0 that asked for it) or closed. */
export type Ending = "keep" | "keep-1.0" | "close";

/** Seconds an idle connection is kept between requests, as the Keep-Alive header tells the client. */
export const KEEP_ALIVE_SECONDS = 75;

const ENDINGS: Record<Ending, string> = {
  keep: `keep-alive: timeout=${KEEP_ALIVE_SECONDS}\r\n\r\n`,
  "keep-1.0": `connection: keep-alive\r\nkeep-alive: timeout=${KEEP_ALIVE_SECONDS}\r\n\r\n`,
  close: "connection: close\r\n\r\n",
};

let dateSecond = -1;
let dateLine = "";

/** The Date header's line (RFC 9110 section 6.6.1), made once a second. */
function dateHeader(): string {
  const now = Date.now();
  const second = Math.floor(now / 1000);
  if (second !== dateSecond) {
    dateSecond = second;
    dateLine = `date: ${new Date(now).toUTCString()}\r\n`;
  }
  return dateLine;
}

/**
 * The answer's bytes: a string (latin1) when the body is ASCII, as nearly every answer is, else a
 * buffer. Throws on a header that could not be sent as given (a CR or LF would inject a header):
 * the answer is a bug then, never written. `withBody` false: the answer to a HEAD.
 */
export function answerBytes(answer: Answer, ending: Ending, withBody: boolean): string | Buffer {
  const { status, headers, body } = answer;
  let head = `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? "Unknown"}\r\n`;
  for (const name in headers) {
    const value = headers[name] as string;
    if (headerName(name) === undefined || FORBIDDEN.test(value)) {
      throw new Error(`the answer's header ${JSON.stringify(name)} cannot be sent`);
    }
    head += `${name}: ${value}\r\n`;
  }
  const length = Buffer.byteLength(body);
  // No length on a 204, which has no body (RFC 9110 section 8.6); a known length otherwise, for
  // nginx reuses an auth_request connection only when it can tell the body is complete.
  if (status !== 204) head += `content-length: ${length}\r\n`;
  head += dateHeader() + ENDINGS[ending];
  if (!withBody || status === 204 || length === 0) return head;
  // A string is written as latin1 (one byte per character): the body must then be ASCII.
  if (length === body.length) return head + body;
  return Buffer.concat([Buffer.from(head, "latin1"), Buffer.from(body, "utf8")]);
}

/** An error's answer, in JSON like every other, on a connection that then closes. */
export function errorBytes(status: number, error: string, message: string, withBody: boolean): string {
  const answer = {
    status,
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ error, message }),
  };
  return answerBytes(answer, "close", withBody) as string;
}

/** A body read whole past its bound (413); the rest of it is dropped. */
export function tooLarge(maxBodyBytes: number): Answer {
  const message = `The body is larger than ${maxBodyBytes} bytes`;
  return {
    status: 413,
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ error: "payload_too_large", message }),
  };
}

/** Bodies held across connections past their bound (503): this one is refused, and dropped. */
export const unavailable: Answer = {
  status: 503,
  headers: { "content-type": "application/json", "retry-after": "1" },
  body: JSON.stringify({
    error: "unavailable",
    message: "Too many request bodies are arriving at once; try again",
  }),
};
