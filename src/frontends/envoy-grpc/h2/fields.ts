// The rules a request's fields must keep (RFC 9113 sections 8.2 and 8.3.1), checked field by field
// as the HPACK decoder reads them: names in lower case and of token characters, values without NUL,
// CR, LF or surrounding whitespace, the request pseudo-headers once each and before every regular
// field, no connection-specific field, `te` only "trailers". A request that breaks one is malformed:
// its stream is reset with PROTOCOL_ERROR (section 8.1.1), never served with a field read otherwise.

const REQUEST_PSEUDO = new Set([":method", ":scheme", ":path", ":authority"]);
const CONNECTION_SPECIFIC = new Set([
  "connection",
  "proxy-connection",
  "keep-alive",
  "transfer-encoding",
  "upgrade",
]);

/** Where a header block's checks stand. */
export type FieldCheck = { regular: boolean; pseudo: boolean; malformed: boolean };

/** A name of token characters in lower case (RFC 9110 section 5.6.2), or a pseudo-header's. */
export function validName(name: string): boolean {
  if (name.length === 0) return false;
  for (let i = name.charCodeAt(0) === 58 ? 1 : 0; i < name.length; i++) {
    const c = name.charCodeAt(i);
    // Controls, space, DEL and beyond, upper case, and the separators ( ) , / : ; < = > ? @ [ \ ] { } "
    if (c <= 0x20 || c >= 0x7f || (c >= 0x41 && c <= 0x5a)) return false;
    if (c === 0x22 || c === 0x28 || c === 0x29 || c === 0x2c || c === 0x2f) return false;
    if ((c >= 0x3a && c <= 0x40) || (c >= 0x5b && c <= 0x5d) || c === 0x7b || c === 0x7d) return false;
  }
  return true;
}

export function validValue(value: string): boolean {
  const last = value.length - 1;
  if (last < 0) return true;
  const first = value.charCodeAt(0);
  const end = value.charCodeAt(last);
  if (first === 0x20 || first === 0x09 || end === 0x20 || end === 0x09) return false;
  for (let i = 0; i <= last; i++) {
    const c = value.charCodeAt(i);
    if (c === 0 || c === 0x0a || c === 0x0d) return false;
  }
  return true;
}

/**
 * Checks one field; `seen` is what the block already holds under this name, `valid` whether its
 * characters pass validName and validValue (the decoder knows it of its tables' entries).
 */
export function checkField(
  check: FieldCheck,
  name: string,
  value: string,
  seen: string | undefined,
  valid: boolean,
): void {
  if (check.malformed) return;
  if (!valid) {
    check.malformed = true;
    return;
  }
  if (name.charCodeAt(0) === 58) {
    // A pseudo-header: a known one, once, before any regular field.
    check.pseudo = true;
    if (check.regular || seen !== undefined || !REQUEST_PSEUDO.has(name)) check.malformed = true;
  } else {
    check.regular = true;
    if (CONNECTION_SPECIFIC.has(name) || (name === "te" && value !== "trailers")) check.malformed = true;
  }
}
