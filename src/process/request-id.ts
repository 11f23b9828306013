// The proxy's request id (x-request-id) as log lines and spans carry it.

/** The longest request id a log line or span carries: Envoy's are 36 characters (a UUID). */
const MAX_REQUEST_ID = 128;

/** The request id: bounded, undefined when absent or empty. */
export function requestIdOf(value: string | string[] | undefined): string | undefined {
  const id = Array.isArray(value) ? value[0] : value;
  if (id === undefined || id === "") return undefined;
  return id.length > MAX_REQUEST_ID ? id.slice(0, MAX_REQUEST_ID) : id;
}
