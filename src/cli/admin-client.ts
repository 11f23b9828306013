// The admin API as the CLI calls it: where it is, the bearer token, and every failure as a CliError with its exit code.
import { BEARER_TOKEN_TEXT } from "../config/env-reader.js";
import { CliError, EXIT } from "./exit.js";

export const DEFAULT_ADMIN_URL = "http://127.0.0.1:9090";
/** Long enough for a reload or a scrypt hash on a busy machine; an admin call never streams. */
const TIMEOUT_MS = 15_000;

export type AdminClient = {
  /** The JSON object a 2xx answers (undefined for 204); a CliError otherwise. */
  call<T>(method: string, path: string, body?: unknown): Promise<T>;
};

/** What a page of a listing must hold: its entries, and the cursor of the next page or null. */
type Page = { items: unknown; next: unknown };

/**
 * Every entry of a listing, page after page: `read(cursor)` asks for one page (undefined: the first).
 * A page without its list, with a cursor that is neither a string nor null, or with one answered
 * before (a tollgate from before the listing paged answers no cursor at all) is a bad answer, exit 3:
 * asked again, it would be asked forever, every entry kept each time.
 */
export async function everyPage<T>(
  read: (cursor: string | undefined) => Promise<Page>,
  first: string | undefined,
  all: boolean,
): Promise<{ items: T[]; next: string | null }> {
  const items: T[] = [];
  const seen = new Set<string>(first === undefined ? [] : [first]);
  let cursor = first;
  for (;;) {
    const page = await read(cursor);
    const { next } = page;
    if (!Array.isArray(page.items) || (next !== null && typeof next !== "string"))
      throw new CliError(EXIT.unreachable, "the admin API answered a page without its list or next cursor");
    for (const item of page.items) items.push(item as T);
    if (next === null || !all) return { items, next };
    if (seen.has(next))
      throw new CliError(EXIT.unreachable, "the admin API answered a page's cursor twice: stopped there");
    seen.add(next);
    cursor = next;
  }
}

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

function refusal(status: number, body: { error?: unknown; message?: unknown; problems?: unknown }): CliError {
  const message = typeof body.message === "string" ? body.message : `answered ${status}`;
  const problems = Array.isArray(body.problems)
    ? body.problems.map((p) => (typeof p === "string" ? p : JSON.stringify(p)))
    : [];
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
  // Checked without echoing it: fetch could not send anything else as a header value.
  if (!BEARER_TOKEN_TEXT.test(token))
    throw new CliError(
      EXIT.usage,
      "the admin token holds a space, a line break or a character outside ASCII (a bad paste?)",
    );
  return {
    async call<T>(method: string, path: string, body?: unknown): Promise<T> {
      const url = new URL(`${base.pathname.replace(/\/$/, "")}${path}`, base);
      let res: Response;
      let text: string;
      try {
        res = await fetch(url, {
          method,
          headers: {
            authorization: `Bearer ${token}`,
            ...(body === undefined ? {} : { "content-type": "application/json" }),
          },
          body: body === undefined ? undefined : JSON.stringify(body),
          // The admin API never redirects. Followed, a redirect would send the body (a new password)
          // to wherever it points, and the token too where that is the same origin.
          redirect: "manual",
          signal: AbortSignal.timeout(TIMEOUT_MS),
        });
      } catch (error) {
        throw new CliError(EXIT.unreachable, `cannot reach the admin API at ${shown(base)}: ${cause(error)}`);
      }
      if (res.status >= 300 && res.status < 400)
        throw new CliError(
          EXIT.unreachable,
          `${shown(base)} answered ${res.status}, a redirect, which tollgate's admin API never does: give the admin listener's own URL`,
        );
      try {
        text = await res.text();
      } catch (error) {
        // A body cut short (the timeout, a reset) is no answer, not an empty one.
        throw new CliError(
          EXIT.unreachable,
          `${shown(base)} answered ${res.status} but not the rest: ${cause(error)}`,
        );
      }
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
      // Every 2xx of the admin API but a 204 is a JSON object, which the commands read fields of.
      if (res.status === 204) return undefined as T;
      if (typeof json !== "object" || json === null || Array.isArray(json))
        throw new CliError(
          EXIT.unreachable,
          `${shown(base)} answered ${res.status} without a JSON object: is it tollgate's admin port?`,
        );
      return json as T;
    },
  };
}
