// One canonical path per request target, or a refusal when an upstream could read the target otherwise.

export type CanonicalTarget = { ok: true; path: string } | { ok: false; problem: string };

const refuse = (problem: string): CanonicalTarget => ({ ok: false, problem });

/**
 * Already canonical: lower-case segments of unreserved characters that neither start nor end with a
 * dot (no dot segment, nothing a server may trim), no query.
 */
const CANONICAL = /^(?:\/[a-z0-9_~-](?:[a-z0-9._~-]*[a-z0-9_~-])?)+$|^\/$/;
/** Unreserved characters (RFC 3986): their escapes mean the character itself everywhere. */
const UNRESERVED = /^[A-Za-z0-9._~-]$/;
/**
 * Characters that may stand in a path raw. `;` is left out: servlet containers and some routers cut
 * a segment at it (path parameters), so `/api/search;x` could reach `/api/search` there.
 */
const RAW_PATH = /^[A-Za-z0-9._~!$&'()*+,=:@/%-]$/;
/** Escapes kept as they are: no upstream that decodes them gets a separator, a dot or a cut from them. */
const KEPT_ESCAPE = /^[!$&'()*+,=:@]$/;

const strictUtf8 = new TextDecoder("utf-8", { fatal: true });

/**
 * A query that could name a method-override parameter: one with an escape, or with "method" in
 * any case. Most queries are neither and cost this one test.
 */
const OVERRIDE_HINT = /%|method/i;

/** A query parameter's name as PHP, Rack and Spring read it: escapes and `+` decoded. */
function paramName(part: string): string {
  const end = part.indexOf("=");
  const raw = (end === -1 ? part : part.slice(0, end)).replaceAll("+", " ");
  try {
    return decodeURIComponent(raw);
  } catch {
    return raw;
  }
}

/**
 * Whether the query has a `_method` parameter, which Symfony and Laravel (and Spring's, Rails' and
 * ASP.NET's forms, from a body tollgate never reads) take for the request's method: a
 * `POST /api/search?_method=GET` would be charged as a POST and served by the GET route. Spelled as
 * PHP reads names: any case here, leading spaces dropped, `.`, space and an unclosed `[` as `_`,
 * `_method[]` as `_method`; `;` separates parameters for older Rack.
 */
function overridesMethod(query: string): boolean {
  if (!OVERRIDE_HINT.test(query)) return false;
  for (const part of query.split(/[&;]/)) {
    let name = paramName(part).trimStart().toLowerCase();
    const open = name.indexOf("[");
    if (open !== -1 && name.indexOf("]", open) !== -1) name = name.slice(0, open);
    if (name.replace(/[. []/g, "_") === "_method") return true;
  }
  return false;
}

/** True when a character could be read as ASCII by an upstream that folds case or normalizes Unicode. */
function foldsToAscii(char: string): boolean {
  // biome-ignore lint/suspicious/noControlCharactersInRegex: the test is for ASCII, controls included
  const ascii = /[\u0000-\u007f]/;
  return (
    ascii.test(char.normalize("NFKC")) || ascii.test(char.toUpperCase()) || ascii.test(char.toLowerCase())
  );
}

/** `%XX` at `at`, as a byte; undefined when malformed. */
function escapeAt(path: string, at: number): number | undefined {
  const hex = path.slice(at + 1, at + 3);
  return /^[0-9A-Fa-f]{2}$/.test(hex) ? Number.parseInt(hex, 16) : undefined;
}

/** A run of escaped non-ASCII bytes: valid UTF-8 that no upstream could fold into ASCII, re-escaped. */
function nonAsciiRun(bytes: number[]): string | undefined {
  let text: string;
  try {
    text = strictUtf8.decode(new Uint8Array(bytes));
  } catch {
    return undefined;
  }
  for (const char of text) if (foldsToAscii(char)) return undefined;
  return bytes.map((b) => `%${b.toString(16).toUpperCase().padStart(2, "0")}`).join("");
}

/** The path with unreserved escapes decoded and letters lower-cased; undefined names the first problem. */
function decodePath(path: string): { decoded: string } | { problem: string } {
  let out = "";
  let i = 0;
  while (i < path.length) {
    const char = path[i] as string;
    if (!RAW_PATH.test(char)) return { problem: `the character ${JSON.stringify(char)} in the path` };
    if (char !== "%") {
      out += char.toLowerCase();
      i += 1;
      continue;
    }
    const byte = escapeAt(path, i);
    if (byte === undefined) return { problem: "a malformed percent-escape" };
    if (byte >= 0x80) {
      const bytes: number[] = [];
      for (;;) {
        const b = path[i] === "%" ? escapeAt(path, i) : undefined;
        if (b === undefined || b < 0x80) break;
        bytes.push(b);
        i += 3;
      }
      const run = nonAsciiRun(bytes);
      if (run === undefined)
        return { problem: "an escape that is not UTF-8, or that Unicode folding reads as ASCII" };
      out += run;
      continue;
    }
    const decoded = String.fromCharCode(byte);
    if (UNRESERVED.test(decoded)) out += decoded.toLowerCase();
    else if (KEPT_ESCAPE.test(decoded)) out += `%${byte.toString(16).toUpperCase()}`;
    else return { problem: `the escape %${byte.toString(16).toUpperCase().padStart(2, "0")} in the path` };
    i += 3;
  }
  return { decoded: out };
}

/**
 * The request target as the policy sees it, decided once, here: the path without its query, with
 * unreserved escapes decoded, letters lower-cased, repeated and trailing slashes dropped. A target
 * that an upstream could read as another path is refused instead of guessed at: a fragment (`#`),
 * a backslash, control bytes, spaces or raw non-ASCII anywhere; in the path, `;`, dot segments
 * (raw or escaped), escaped separators and other delimiters, `%25`, malformed or non-UTF-8 escapes,
 * and characters that fold into ASCII; targets that are not origin-form (`http://…`, `//host/…`);
 * a `_method` query parameter (overridesMethod).
 */
export function canonicalTarget(raw: string): CanonicalTarget {
  const query = raw.indexOf("?");
  const rawPath = query === -1 ? raw : raw.slice(0, query);
  if (CANONICAL.test(rawPath) && query === -1) return { ok: true, path: rawPath };
  for (let i = 0; i < raw.length; i += 1) {
    const code = raw.charCodeAt(i);
    if (code <= 0x20 || code >= 0x7f) return refuse("a control byte, space or non-ASCII character");
    if (code === 0x23) return refuse("a fragment (#)");
    if (code === 0x5c) return refuse("a backslash");
  }
  if (!rawPath.startsWith("/") || rawPath.startsWith("//"))
    return refuse("a target that is not a plain path");
  if (query !== -1 && overridesMethod(raw.slice(query + 1)))
    return refuse("a _method parameter, which some frameworks take for the request's method");
  if (CANONICAL.test(rawPath)) return { ok: true, path: rawPath };
  const result = decodePath(rawPath);
  if ("problem" in result) return refuse(result.problem);
  const segments: string[] = [];
  for (const segment of result.decoded.split("/")) {
    if (segment === "") continue;
    if (segment === "." || segment === "..") return refuse("a dot segment");
    // Windows servers and some proxies drop a segment's trailing dots: /api/search. reads as /api/search.
    if (segment.endsWith(".")) return refuse("a path segment ending in a dot");
    segments.push(segment);
  }
  return { ok: true, path: `/${segments.join("/")}` };
}
