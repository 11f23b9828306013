// One fetch of the identity provider's JSON (its discovery document, its JWKS): one deadline over the
// whole answer, no redirect followed, at most 1 MB read. An error names the URL as logs may show it
// (origin and path) and says why in a few words; never what the body held, nor fetch's own message,
// which can repeat the URL whole, password and query included.

const MAX_BODY = 1 << 20;

/** A URL as logs show it: origin and path, never a user, password or query (which may hold a key). */
export function shownUrl(url: string): string {
  try {
    const parsed = new URL(url);
    return `${parsed.origin}${parsed.pathname}`;
  } catch {
    return "the provider's URL";
  }
}

const failure = (address: string, why: string): Error => new Error(`${shownUrl(address)}: ${why}`);

/** `read`'s answer; what it throws, said of `address` (a document read from there did not suit). */
export function readOf<T>(address: string, read: () => T): T {
  try {
    return read();
  } catch (error) {
    throw failure(address, (error as Error).message);
  }
}

/**
 * The max-age of a Cache-Control header, in ms, when it gives a whole number of seconds; undefined
 * otherwise (the refresh then keeps its default interval). Not its leading digits: `max-age=1e9` is
 * no max-age, not one second. `no-cache` and `no-store` do not shorten the interval: Keycloak's
 * certificate endpoint sends `no-cache` on every answer (keycloak/keycloak#15216), and refetching
 * the keys each minute from every process would only load the provider; a new key is fetched when
 * a token names its kid.
 */
export function keepForMs(header: string | null): number | undefined {
  if (header === null) return undefined;
  for (const part of header.split(",")) {
    const [name = "", value] = part.split("=", 2).map((s) => s.trim());
    if (name.toLowerCase() !== "max-age") continue;
    const seconds = value?.replace(/^"(.*)"$/, "$1");
    return seconds !== undefined && /^\d+$/.test(seconds) ? Number(seconds) * 1000 : undefined;
  }
  return undefined;
}

const timedOut = (error: unknown): boolean =>
  error instanceof Error && (error.name === "TimeoutError" || error.name === "AbortError");

/** Why a request got no answer: a deadline, a network error's code, or (else) that it failed. */
function requestProblem(error: unknown, timeoutMs: number): string {
  if (timedOut(error)) return `timed out after ${timeoutMs} ms`;
  const code = (error as { cause?: { code?: unknown } }).cause?.code;
  return typeof code === "string" ? code : "the request failed";
}

/** Where a redirect pointed, as logs may show it (a provider's Location may carry anything). */
function redirectTarget(response: Response, address: string): string {
  const location = response.headers.get("location");
  if (location === null) return "";
  try {
    return ` to ${shownUrl(new URL(location, address).href)}`;
  } catch {
    return "";
  }
}

export async function getJson(
  address: string,
  timeoutMs: number,
): Promise<{ body: unknown; maxAge: number | undefined }> {
  let response: Response;
  try {
    // The deadline covers the body too: a provider that sends headers and then stalls is cut off.
    response = await fetch(address, {
      signal: AbortSignal.timeout(timeoutMs),
      headers: { accept: "application/json" },
      // Seen and refused here, to say so: "error" would leave fetch's "fetch failed", no reason.
      redirect: "manual",
    });
  } catch (error) {
    throw failure(address, requestProblem(error, timeoutMs));
  }
  if (!response.ok) {
    await response.body?.cancel().catch(() => undefined);
    const redirect = response.status >= 300 && response.status < 400;
    throw failure(
      address,
      redirect
        ? `redirect refused (${response.status}${redirectTarget(response, address)})`
        : `answered ${response.status}`,
    );
  }
  const text = await boundedText(response, address, timeoutMs);
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    // Not the parser's message: it quotes the body.
    throw failure(address, "not JSON");
  }
  return { body, maxAge: keepForMs(response.headers.get("cache-control")) };
}

/**
 * The body as text, read no further than MAX_BODY bytes: a provider (or whoever answers in its place)
 * sending more is cut off there, not held in memory whole first.
 */
async function boundedText(response: Response, address: string, timeoutMs: number): Promise<string> {
  const tooLarge = () => failure(address, `answered more than ${MAX_BODY} bytes`);
  const declared = Number(response.headers.get("content-length") ?? Number.NaN);
  if (declared > MAX_BODY) {
    await response.body?.cancel().catch(() => undefined);
    throw tooLarge();
  }
  if (response.body === null) return "";
  const chunks: Uint8Array[] = [];
  let size = 0;
  const reader = response.body.getReader();
  for (;;) {
    let chunk: Awaited<ReturnType<typeof reader.read>>;
    try {
      chunk = await reader.read();
    } catch (error) {
      throw failure(address, timedOut(error) ? `timed out after ${timeoutMs} ms` : "the answer broke off");
    }
    if (chunk.done) break;
    size += chunk.value.byteLength;
    if (size > MAX_BODY) {
      await reader.cancel().catch(() => undefined);
      throw tooLarge();
    }
    chunks.push(chunk.value);
  }
  return Buffer.concat(chunks, size).toString("utf8");
}
