// The admin API as the CLI calls it: where it is, the bearer token, and every failure as a CliError with its exit code.
import { CliError, EXIT } from "./exit.js";

export const DEFAULT_ADMIN_URL = "http://127.0.0.1:9090";
/** Long enough for a reload or a scrypt hash on a busy machine; an admin call never streams. */
const TIMEOUT_MS = 15_000;

export type AdminClient = {
  /** The JSON answer of a 2xx (undefined for 204); a CliError otherwise. */
  call<T>(method: string, path: string, body?: unknown): Promise<T>;
};

export type Connection = { url?: string | undefined; adminToken?: string | undefined };

/** The URL without credentials or query: what messages may show. */
function shown(url: URL): string {
  return `${url.protocol}//${url.host}${url.pathname.replace(/\/$/, "")}`;
}

function baseUrl(given: string | undefined): URL {
  const text = given ?? process.env.TOLLGATE_ADMIN_URL ?? DEFAULT_ADMIN_URL;
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new CliError(EXIT.usage, "the admin URL is not a URL (--url or TOLLGATE_ADMIN_URL)");
  }
  if (url.protocol !== "http:" && url.protocol !== "https:")
    throw new CliError(EXIT.usage, `the admin URL must be http or https, not ${url.protocol}`);
  // fetch refuses such a URL with an error that repeats it whole, password included.
  if (url.username !== "" || url.password !== "")
    throw new CliError(
      EXIT.usage,
      "the admin URL must not hold a user or password (the admin token authenticates)",
    );
  return url;
}

/**
 * Why fetch failed, in a word: ECONNREFUSED, ENOTFOUND, a timeout. Never fetch's own message, which
 * can repeat the URL or a header value (the admin token) whole.
 */
function cause(error: unknown): string {
  if (error instanceof Error && error.name === "TimeoutError")
    return `no answer within ${TIMEOUT_MS / 1000} s`;
  const code = (error as { cause?: { code?: unknown } }).cause?.code;
  return typeof code === "string" && /^[A-Z_]{2,40}$/.test(code) ? code : "the request failed";
}

/** A token fetch can send: visible ASCII, as an HTTP header value must be (checked without echoing it). */
const TOKEN_TEXT = /^[\x21-\x7e]+$/;

function refusal(status: number, body: { error?: unknown; message?: unknown; problems?: unknown }): CliError {
  const message = typeof body.message === "string" ? body.message : `answered ${status}`;
  const problems = Array.isArray(body.problems) ? body.problems.map(String) : [];
  if (status === 401)
    return new CliError(
      EXIT.unreachable,
      "the admin API refused the admin token (ADMIN_TOKEN or --admin-token)",
      { status },
    );
  if (status >= 500)
    return new CliError(EXIT.unreachable, `the admin API failed (${status}): ${message}`, { status });
  return new CliError(EXIT.failed, message, { details: problems, status });
}

export function adminClient(connection: Connection): AdminClient {
  const base = baseUrl(connection.url);
  const token = connection.adminToken ?? process.env.ADMIN_TOKEN;
  if (token === undefined || token === "")
    throw new CliError(EXIT.usage, "no admin token: set ADMIN_TOKEN or pass --admin-token");
  if (!TOKEN_TEXT.test(token))
    throw new CliError(
      EXIT.usage,
      "the admin token holds a space, a line break or a character outside ASCII (a bad paste?)",
    );
  return {
    async call<T>(method: string, path: string, body?: unknown): Promise<T> {
      const url = new URL(`${base.pathname.replace(/\/$/, "")}${path}`, base);
      let res: Response;
      try {
        res = await fetch(url, {
          method,
          headers: {
            authorization: `Bearer ${token}`,
            ...(body === undefined ? {} : { "content-type": "application/json" }),
          },
          body: body === undefined ? undefined : JSON.stringify(body),
          signal: AbortSignal.timeout(TIMEOUT_MS),
        });
      } catch (error) {
        throw new CliError(EXIT.unreachable, `cannot reach the admin API at ${shown(base)}: ${cause(error)}`);
      }
      const text = await res.text().catch(() => "");
      let json: unknown;
      try {
        json = text === "" ? undefined : JSON.parse(text);
      } catch {
        throw new CliError(
          EXIT.unreachable,
          `${shown(base)} answered ${res.status} without JSON: is it tollgate's admin port?`,
        );
      }
      if (!res.ok) throw refusal(res.status, (json ?? {}) as Record<string, unknown>);
      return json as T;
    },
  };
}
