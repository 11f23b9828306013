// A request body's framing (RFC 9112 sections 6 and 7): a length, or chunks read strictly. Fed the
// connection's bytes as they come; says how many belong to the body and when it has ended, handing
// the body's data to `keep` (or to nothing, for a body the route does not read).

/** Longest chunk-size line (with any extensions) and trailer section read. */
const MAX_LINE_BYTES = 4096;
const MAX_TRAILER_BYTES = 16 * 1024;
/** A chunk size: up to 8 hex digits, then optional extensions after a `;` (no controls). */
const SIZE_LINE = /^([0-9a-fA-F]{1,8})(?:[\t ]*;[\t\x20-\x7e\x80-\xff]*)?$/;
/** A trailer field: a token, a colon, a value without controls. */
const TRAILER_LINE = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+:[\t\x20-\x7e\x80-\xff]*$/;
const LF = 0x0a;

/** The body's framing is broken: answered 400 and the connection closed. */
export class BodyError extends Error {}

type Keep = ((data: Buffer) => void) | undefined;

export type BodyReader = {
  /** Reads from `data` at `offset`; returns the offset of the first byte past the body's (or data's) end. */
  feed(data: Buffer, offset: number, keep: Keep): number;
  readonly done: boolean;
};

export function lengthBody(length: number): BodyReader {
  let left = length;
  return {
    feed(data, offset, keep) {
      const take = Math.min(left, data.length - offset);
      if (take > 0) keep?.(data.subarray(offset, offset + take));
      left -= take;
      return offset + take;
    },
    get done() {
      return left === 0;
    },
  };
}

const SIZE = 0;
const DATA = 1;
const DATA_END = 2;
const TRAILERS = 3;
const DONE = 4;

export function chunkedBody(): BodyReader {
  let state = SIZE;
  let left = 0;
  /** The line being read (size line, the CRLF after data, a trailer), across buffers. */
  let line = "";
  let trailerBytes = 0;

  /** The rest of a line from `offset`: the offset past its LF, or -1 when it goes on in the next buffer. */
  const readLine = (data: Buffer, offset: number, limit: number): number => {
    const lf = data.indexOf(LF, offset);
    const end = lf === -1 ? data.length : lf;
    line += data.toString("latin1", offset, end);
    if (line.length > limit) throw new BodyError("a chunk line is too long");
    if (lf === -1) return -1;
    // CRLF only: a bare LF ends a line for some parsers and not for others.
    if (line.charCodeAt(line.length - 1) !== 0x0d) throw new BodyError("a chunk line does not end in CRLF");
    line = line.slice(0, -1);
    return lf + 1;
  };

  return {
    feed(data, offset, keep) {
      let at = offset;
      while (at < data.length && state !== DONE) {
        if (state === DATA) {
          const take = Math.min(left, data.length - at);
          keep?.(data.subarray(at, at + take));
          left -= take;
          at += take;
          if (left === 0) state = DATA_END;
          continue;
        }
        const next = readLine(data, at, state === TRAILERS ? MAX_TRAILER_BYTES : MAX_LINE_BYTES);
        if (next === -1) return data.length;
        at = next;
        const text = line;
        line = "";
        if (state === SIZE) {
          const size = SIZE_LINE.exec(text);
          if (size === null) throw new BodyError("a chunk size is not valid");
          left = Number.parseInt(size[1] as string, 16);
          state = left === 0 ? TRAILERS : DATA;
        } else if (state === DATA_END) {
          if (text !== "") throw new BodyError("a chunk's data is longer than its size");
          state = SIZE;
        } else if (text === "") {
          state = DONE;
        } else {
          trailerBytes += text.length + 2;
          if (trailerBytes > MAX_TRAILER_BYTES || !TRAILER_LINE.test(text)) {
            throw new BodyError("a trailer is not valid");
          }
        }
      }
      return at;
    },
    get done() {
      return state === DONE;
    },
  };
}

const NOTHING = Buffer.alloc(0);

/**
 * A body a route reads, copied into one buffer grown by doubling up to `cap` and counted whole in
 * `held` (the bytes held by every connection): neither the chunks of a body cut small (a chunked
 * body of 1-byte chunks, a Buffer each) nor the reads they came in are held past what is counted.
 */
export class KeptBody {
  private buffer = NOTHING;
  /** Bytes of `buffer` read so far. */
  size = 0;

  constructor(
    private readonly cap: number,
    private readonly held: { bytes: number },
    private readonly maxHeld: number,
  ) {}

  /** Keeps `chunk`; false, keeping nothing more, when that would take `held` past `maxHeld`. */
  add(chunk: Buffer): boolean {
    const length = this.size + chunk.length;
    let buffer = this.buffer;
    if (length > buffer.length) {
      const grown = Math.min(Math.max(length, buffer.length * 2), this.cap);
      if (this.held.bytes + grown - buffer.length > this.maxHeld) return false;
      buffer = Buffer.allocUnsafe(grown);
      this.buffer.copy(buffer, 0, 0, this.size);
      this.held.bytes += grown - this.buffer.length;
      this.buffer = buffer;
    }
    chunk.copy(buffer, this.size);
    this.size = length;
    return true;
  }

  get data(): Buffer {
    return this.buffer.subarray(0, this.size);
  }

  /** Gives back the bytes counted in `held`. */
  release(): void {
    this.held.bytes -= this.buffer.length;
    this.buffer = NOTHING;
  }
}
