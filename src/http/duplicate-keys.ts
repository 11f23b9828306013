// A JSON body's key written twice in one object: JSON.parse keeps the last without a word, where
// another reader of the same bytes (a proxy's filter, an audit log) may take the first.

type Frame = { keys: Set<string>; expectKey: boolean } | undefined;

/** The end (exclusive) of the string literal opening at `start`, or -1 when it never closes. */
function stringEnd(text: string, start: number): number {
  for (let i = start + 1; i < text.length; i += 1) {
    const char = text.charCodeAt(i);
    if (char === 0x5c) i += 1;
    else if (char === 0x22) return i + 1;
  }
  return -1;
}

/**
 * The first key that some object of `text` holds twice, compared as JSON.parse decodes them
 * ("a" and "\u0061" are one key); undefined when there is none, or when `text` is no JSON, which the
 * parser then reports itself. Strings are skipped whole, so braces in them count for nothing.
 */
export function duplicateKey(text: string): string | undefined {
  // One frame per open object or array (undefined for an array): the object's keys so far.
  const open: Frame[] = [];
  for (let i = 0; i < text.length; i += 1) {
    const char = text[i];
    const top = open[open.length - 1];
    if (char === "{") open.push({ keys: new Set(), expectKey: true });
    else if (char === "[") open.push(undefined);
    else if (char === "}" || char === "]") open.pop();
    else if (char === "," && top !== undefined) top.expectKey = true;
    else if (char === '"') {
      const end = stringEnd(text, i);
      if (end === -1) return undefined;
      if (top?.expectKey === true) {
        let key: string;
        try {
          key = JSON.parse(text.slice(i, end)) as string;
        } catch {
          return undefined;
        }
        if (top.keys.has(key)) return key;
        top.keys.add(key);
        top.expectKey = false;
      }
      i = end - 1;
    }
  }
  return undefined;
}

/** UTF-32 as code points, in the byte order given (none: the BOM's, else big-endian); undefined if it is not. */
function utf32(buf: Buffer, order: "le" | "be" | undefined): string | undefined {
  if (buf.length % 4 !== 0) return undefined;
  const le = order === "le" || (order === undefined && buf.readUInt32LE(0) === 0xfeff);
  let text = "";
  for (let i = 0; i < buf.length; i += 4) {
    const point = le ? buf.readUInt32LE(i) : buf.readUInt32BE(i);
    if (point > 0x10ffff) return undefined;
    text += String.fromCodePoint(point);
  }
  return text;
}

/** The body as text in its charset (body-parser takes only UTF-8, -16 and -32); undefined when it is not. */
export function bodyText(buf: Buffer, charset: string): string | undefined {
  const name = charset.toLowerCase();
  const order = name.endsWith("le") ? "le" : name.endsWith("be") ? "be" : undefined;
  if (name.startsWith("utf-32")) return utf32(buf, order);
  try {
    return new TextDecoder(name).decode(buf);
  } catch {
    return undefined;
  }
}
