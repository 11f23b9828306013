// HPACK for the server's answers (RFC 7541): literals without indexing only, so the encoder keeps no
// dynamic table and a block is the same bytes on every connection. The constant blocks of a gRPC
// answer are encoded once.

/** `:status` is entry 8 of the static table, `content-type` entry 31. */
const STATUS_NAME_INDEX = 8;
const CONTENT_TYPE_INDEX = 31;

function integer(out: number[], value: number, prefix: number, first: number): void {
  const max = (1 << prefix) - 1;
  if (value < max) {
    out.push(first | value);
    return;
  }
  out.push(first | max);
  let rest = value - max;
  while (rest >= 128) {
    out.push((rest % 128) + 128);
    rest = Math.floor(rest / 128);
  }
  out.push(rest);
}

function string(out: number[], value: string): void {
  const bytes = Buffer.from(value, "latin1");
  integer(out, bytes.length, 7, 0);
  for (const byte of bytes) out.push(byte);
}

/** A field as a literal without indexing: by its static table index, or with its name spelled. */
function literal(out: number[], name: string | number, value: string): void {
  if (typeof name === "number") integer(out, name, 4, 0);
  else {
    out.push(0);
    string(out, name);
  }
  string(out, value);
}

/** A header block of these fields, in order. */
export function encodeBlock(fields: readonly (readonly [string, string])[]): Buffer {
  const out: number[] = [];
  for (const [name, value] of fields) {
    if (name === ":status" && value === "200") out.push(0x80 | STATUS_NAME_INDEX);
    else if (name === ":status") literal(out, STATUS_NAME_INDEX, value);
    else if (name === "content-type") literal(out, CONTENT_TYPE_INDEX, value);
    else literal(out, name, value);
  }
  return Buffer.from(out);
}
