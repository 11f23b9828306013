// An HTTP/1.1 request head (RFC 9112) as the check listener reads it: strictly. Its clients are
// proxies, which send well-formed requests; anything that two parsers could read two ways (a bare
// CR or LF, obs-fold, a space before a colon, two lengths, a length beside Transfer-Encoding, a
// coding other than chunked) is refused with 400 and the connection closed, never guessed at, so
// that the proxy and tollgate can never disagree on where one request ends and the next begins.
import { METHODS } from "node:http";

/** The headers as node:http gives them (IncomingHttpHeaders): lower-case names, repeated ones merged. */
export type Headers = Record<string, string | string[] | undefined>;

export type Head = {
  method: string;
  /** The request target as sent. */
  url: string;
  headers: Headers;
  /** Whether the connection stays open after the answer (HTTP/1.1 unless `close`; 1.0 with `keep-alive`). */
  keepAlive: boolean;
  /** HTTP/1.0: its answers say `connection: keep-alive` when it asked for it. */
  http10: boolean;
  /** The body's framing: its length, or "chunked". */
  body: number | "chunked";
  /** Expect: 100-continue, to be answered before the body is read. */
  expectsContinue: boolean;
};

/** Why a head is refused: the status and the message of its JSON answer. */
export type HeadError = { status: 400 | 417; message: string };

const INVALID: HeadError = { status: 400, message: "The request is not valid HTTP/1.1" };
const CONNECT: HeadError = { status: 400, message: "CONNECT is not served here: tollgate is not a proxy" };

/** The methods node:http's parser takes: any other is refused as it refuses it. */
const KNOWN_METHODS = new Set(METHODS);

/** A token (RFC 9110 section 5.6.2): a header's name. */
const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
/**
 * Octets no header value may hold: controls but HTAB, and DEL. Lines are split at CRLF, so this is
 * also where a bare CR or LF is refused (RFC 9112 section 2.2: a bare LF would end a line for some
 * parsers and not for others). answer.ts holds the answers' values to it too (no header injection).
 */
export const FORBIDDEN = /[^\t\x20-\x7e\x80-\xff]/;
/** A request target: visible ASCII, no space (node:http refuses other bytes too; clients percent-encode them). */
const TARGET = /^[\x21-\x7e]+$/;
const DIGITS = /^[0-9]{1,15}$/;

/** Headers of which node:http keeps the first and drops the repeats (its matchKnownFields). */
const FIRST_WINS = new Set([
  "content-type",
  "content-length",
  "user-agent",
  "referer",
  "host",
  "authorization",
  "proxy-authorization",
  "if-modified-since",
  "if-unmodified-since",
  "from",
  "location",
  "max-forwards",
  "retry-after",
  "etag",
  "last-modified",
  "server",
  "age",
  "expires",
]);

/** node:http's limit on the headers it keeps from one request; the rest are ignored, as there. */
const MAX_HEADERS = 2000;

/**
 * Header names as sent → lower case, each checked once: a proxy sends the same few names on every
 * request. Bounded; names made up to churn it only cost what checking them every time would. Only
 * short names are kept: a name may be nearly the whole 64 KiB head, and 1024 such kept 57 MiB for good.
 */
const names = new Map<string, string>();
const MAX_NAMES = 1024;
const MAX_NAME_LENGTH = 64;

/** A header's name in lower case, or undefined when it is no token. */
export function headerName(name: string): string | undefined {
  let lower = names.get(name);
  if (lower === undefined) {
    if (!TOKEN.test(name)) return undefined;
    lower = name.toLowerCase();
    if (name.length > MAX_NAME_LENGTH) return lower;
    if (names.size >= MAX_NAMES) names.clear();
    names.set(name, lower);
  }
  return lower;
}

const SPACE = 0x20;
const TAB = 0x09;

/** `text` without the spaces and tabs (OWS) at either end; no copy when there are none. */
function trimOws(text: string): string {
  let start = 0;
  let end = text.length;
  while (start < end && (text.charCodeAt(start) === SPACE || text.charCodeAt(start) === TAB)) start += 1;
  while (end > start && (text.charCodeAt(end - 1) === SPACE || text.charCodeAt(end - 1) === TAB)) end -= 1;
  return start === 0 && end === text.length ? text : text.slice(start, end);
}

function add(headers: Headers, name: string, value: string): void {
  const known = headers[name];
  if (known === undefined) {
    headers[name] = name === "set-cookie" ? [value] : value;
  } else if (name === "set-cookie") {
    (known as string[]).push(value);
  } else if (!FIRST_WINS.has(name)) {
    headers[name] = `${known as string}${name === "cookie" ? "; " : ", "}${value}`;
  }
}

/**
 * The head in `text` (latin1, from the request line to the last header line, without the blank
 * line that ends it), or why it is refused.
 */
export function parseHead(text: string): Head | HeadError {
  const lines = text.split("\r\n");
  const requestLine = (lines[0] as string).split(" ");
  if (requestLine.length !== 3) return INVALID;
  const [method, url, version] = requestLine as [string, string, string];
  if (!KNOWN_METHODS.has(method) || !TARGET.test(url)) return INVALID;
  const http10 = version === "HTTP/1.0";
  if (!http10 && version !== "HTTP/1.1") return INVALID;
  if (method === "CONNECT") return CONNECT;

  const headers: Headers = Object.create(null);
  let length: string | undefined;
  let transferEncoding: string | undefined;
  let hosts = 0;
  for (let i = 1; i < lines.length; i += 1) {
    const line = lines[i] as string;
    const colon = line.indexOf(":");
    // No colon, an empty name, or a name that is no token: a space before the colon, obs-fold.
    if (colon <= 0) return INVALID;
    const lower = headerName(line.slice(0, colon));
    if (lower === undefined) return INVALID;
    const value = trimOws(line.slice(colon + 1));
    if (FORBIDDEN.test(value)) return INVALID;
    if (lower === "content-length") {
      // One length, in digits: a repeated one (even equal) or a list could be read two ways.
      if (length !== undefined || !DIGITS.test(value)) return INVALID;
      length = value;
    } else if (lower === "transfer-encoding") {
      transferEncoding = transferEncoding === undefined ? value : `${transferEncoding}, ${value}`;
    } else if (lower === "host") {
      hosts += 1;
    }
    // Past node's count a line is still read for the framing, and not kept.
    if (i <= MAX_HEADERS) add(headers, lower, value);
  }
  // RFC 9112 section 3.2: a 1.1 request has exactly one Host.
  if (hosts > 1 || (hosts === 0 && !http10)) return INVALID;

  let body: number | "chunked" = 0;
  if (transferEncoding !== undefined) {
    // Only chunked, alone, and never beside a length or in 1.0 (RFC 9112 section 6.1).
    if (length !== undefined || http10 || transferEncoding.toLowerCase() !== "chunked") return INVALID;
    body = "chunked";
  } else if (length !== undefined) {
    body = Number(length);
  }

  const expect = headers.expect as string | undefined;
  let expectsContinue = false;
  if (expect !== undefined) {
    if (expect.toLowerCase() !== "100-continue") {
      return { status: 417, message: "Only Expect: 100-continue is supported" };
    }
    expectsContinue = !http10;
  }

  const connection = headers.connection as string | undefined;
  const keepAlive =
    connection === undefined ? !http10 : connectionKeepsAlive(connection.toLowerCase(), http10);
  return { method, url, headers, keepAlive, http10, body, expectsContinue };
}

/** Connection's options (a list): `close` ends the connection; 1.0 stays only with `keep-alive`. */
function connectionKeepsAlive(connection: string, http10: boolean): boolean {
  if (connection === "keep-alive") return true;
  if (connection === "close") return false;
  const options = connection.split(",").map(trimOws);
  if (options.includes("close")) return false;
  return !http10 || options.includes("keep-alive");
}
