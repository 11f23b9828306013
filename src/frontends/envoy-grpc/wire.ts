// The protobuf wire format, as the hand-written codecs of the hot paths read and write it
// (check-request.ts and check-response.ts, rls-codec.ts): varints, length-delimited fields, skipping what is not read.
export const VARINT = 0;
const FIXED64 = 1;
export const BYTES = 2;
const FIXED32 = 5;

/** What a read that runs past its message's end throws: the caller names the message. */
export class Malformed extends Error {}

const malformed = (): Malformed => new Malformed("malformed protobuf");

/** A cursor over one message's bytes [at, end). */
export class Reader {
  constructor(
    readonly buf: Buffer,
    public at: number,
    readonly end: number,
  ) {}

  varint(): number {
    let result = 0;
    let shift = 1;
    for (let i = 0; i < 10; i += 1) {
      if (this.at >= this.end) throw malformed();
      const byte = this.buf[this.at++] as number;
      result += (byte & 127) * shift;
      if (byte < 128) return result;
      shift *= 128;
    }
    throw malformed();
  }

  /** A length-delimited field's extent, checked against the message's end. */
  span(): number {
    const length = this.varint();
    const start = this.at;
    if (length > this.end - start) throw malformed();
    this.at = start + length;
    return start;
  }

  skip(wireType: number): void {
    switch (wireType) {
      case VARINT:
        this.varint();
        return;
      case FIXED64:
        this.at += 8;
        break;
      case BYTES:
        this.span();
        return;
      case FIXED32:
        this.at += 4;
        break;
      default:
        // Groups (3, 4) are gone from proto3; 6 and 7 are no wire types.
        throw malformed();
    }
    if (this.at > this.end) throw malformed();
  }
}

export const varintSize = (n: number): number => {
  let size = 1;
  let v = n;
  while (v >= 128) {
    v = Math.floor(v / 128);
    size += 1;
  }
  return size;
};

/** Bytes of a length-delimited field of one-byte tag holding `length` bytes. */
export const fieldSize = (length: number): number => 1 + varintSize(length) + length;

export class Writer {
  at = 0;
  constructor(readonly buf: Buffer) {}

  byte(b: number): void {
    this.buf[this.at++] = b;
  }

  varint(n: number): void {
    let v = n;
    while (v >= 128) {
      this.buf[this.at++] = (v & 127) | 128;
      v = Math.floor(v / 128);
    }
    this.buf[this.at++] = v;
  }

  /** A string field of one-byte tag whose UTF-8 length is `length`. */
  string(tag: number, value: string, length: number): void {
    this.buf[this.at++] = tag;
    this.varint(length);
    if (length === value.length && length <= SHORT) {
      // ASCII (its UTF-8 length is its length) and short: copied here, without a call into C++.
      const { buf } = this;
      for (let i = 0; i < length; i += 1) buf[this.at + i] = value.charCodeAt(i);
      this.at += length;
      return;
    }
    this.at += this.buf.write(value, this.at, "utf8");
  }

  open(tag: number, length: number): void {
    this.buf[this.at++] = tag;
    this.varint(length);
  }
}

/** Strings up to this long are measured and copied in JavaScript: a call into C++ costs more. */
const SHORT = 64;

/** A string's UTF-8 length. */
export function utf8Length(value: string): number {
  if (value.length > SHORT) return Buffer.byteLength(value, "utf8");
  for (let i = 0; i < value.length; i += 1) {
    if (value.charCodeAt(i) > 127) return Buffer.byteLength(value, "utf8");
  }
  return value.length;
}

export const tag = (field: number, wireType: number): number => (field << 3) | wireType;

export const text = (buf: Buffer, start: number, end: number): string => buf.toString("utf8", start, end);
