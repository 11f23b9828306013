// Bounds and cleans text that came from a client before it is stored, logged or reflected.

// biome-ignore lint/suspicious/noControlCharactersInRegex: stripping control characters is the point.
const CONTROL = /[\u0000-\u001f\u007f-\u009f\u2028\u2029\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;
const BEYOND_LATIN1 = /[\u0100-\uffff]/;
const HIGH_BYTE = /[\u0080-\u00ff]/;
const utf8 = new TextDecoder("utf-8", { fatal: true });

/**
 * A header value as the client wrote it. node reads header bytes as latin1, so a UTF-8 value
 * ("Anna’s iPhone", as iOS names devices) arrives as "Annaâ\u0080\u0099s iPhone", whose C1 bytes
 * the stripping below would then drop for good. Bytes that are valid UTF-8 are read as UTF-8;
 * any others stay latin1, as received.
 */
function asUtf8(value: string): string {
  if (!HIGH_BYTE.test(value) || BEYOND_LATIN1.test(value)) return value;
  try {
    return utf8.decode(Buffer.from(value, "latin1"));
  } catch {
    return value;
  }
}

/**
 * Control characters, line separators and bidirectional text controls removed, whitespace trimmed,
 * at most `max` characters (whole code points: never half of a surrogate pair).
 */
export function cleanText(value: unknown, max: number): string {
  if (typeof value !== "string") return "";
  const text = asUtf8(value).replace(CONTROL, "").trim();
  return text.length <= max ? text : [...text].slice(0, max).join("");
}
