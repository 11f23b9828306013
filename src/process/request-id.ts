// The proxy's request id (x-request-id) as log lines and spans carry it.

/** The longest request id a log line or span carries: Envoy's are 36 characters (a UUID). */
const MAX_REQUEST_ID = 128;

/**
 * What a request id must not carry into a log line: node refuses CR and LF in a header, but lets
 * through latin1's C1 codes, among them NEL (U+0085), which JSON leaves unescaped and which log
 * readers that split on every Unicode line break take for the end of a line.
 */
// biome-ignore lint/suspicious/noControlCharactersInRegex: finding control characters is the point.
const CONTROL = /[\u0000-\u001f\u007f-\u009f\u2028\u2029]/;
// biome-ignore lint/suspicious/noControlCharactersInRegex: removing control characters is the point.
const CONTROLS = /[\u0000-\u001f\u007f-\u009f\u2028\u2029]/g;

/** The request id: bounded, without control characters, undefined when absent or empty. */
export function requestIdOf(value: string | string[] | undefined): string | undefined {
  const raw = Array.isArray(value) ? value[0] : value;
  if (raw === undefined || raw === "") return undefined;
  // Tested before replacing: a proxy's UUID (the usual case, on every check) is kept as it is.
  const id = CONTROL.test(raw) ? raw.replace(CONTROLS, "") : raw;
  if (id === "") return undefined;
  return id.length > MAX_REQUEST_ID ? id.slice(0, MAX_REQUEST_ID) : id;
}
