// An HPACK decoder (RFC 7541) for request header blocks: the static and dynamic tables, integers,
// plain and Huffman-coded literals. A block is decoded whole even when its list is over the size
// bound (the dynamic table must stay in step with the peer's encoder); only the list is not kept.
import { checkField, type FieldCheck, validName, validValue } from "./fields.js";
import { huffmanDecode } from "./huffman.js";

// biome-ignore format: the table, one entry per line would be 61 lines
const STATIC: readonly (readonly [string, string])[] = [
  [":authority", ""], [":method", "GET"], [":method", "POST"], [":path", "/"], [":path", "/index.html"],
  [":scheme", "http"], [":scheme", "https"], [":status", "200"], [":status", "204"], [":status", "206"],
  [":status", "304"], [":status", "400"], [":status", "404"], [":status", "500"], ["accept-charset", ""],
  ["accept-encoding", "gzip, deflate"], ["accept-language", ""], ["accept-ranges", ""], ["accept", ""],
  ["access-control-allow-origin", ""], ["age", ""], ["allow", ""], ["authorization", ""],
  ["cache-control", ""], ["content-disposition", ""], ["content-encoding", ""], ["content-language", ""],
  ["content-length", ""], ["content-location", ""], ["content-range", ""], ["content-type", ""],
  ["cookie", ""], ["date", ""], ["etag", ""], ["expect", ""], ["expires", ""], ["from", ""], ["host", ""],
  ["if-match", ""], ["if-modified-since", ""], ["if-none-match", ""], ["if-range", ""],
  ["if-unmodified-since", ""], ["last-modified", ""], ["link", ""], ["location", ""], ["max-forwards", ""],
  ["proxy-authenticate", ""], ["proxy-authorization", ""], ["range", ""], ["referer", ""], ["refresh", ""],
  ["retry-after", ""], ["server", ""], ["set-cookie", ""], ["strict-transport-security", ""],
  ["transfer-encoding", ""], ["user-agent", ""], ["vary", ""], ["via", ""], ["www-authenticate", ""],
];

/** A block that cannot be decoded: the connection ends with COMPRESSION_ERROR. */
export class HpackError extends Error {}

/** The headers of one block, lower-case name → value (repeated names joined with ", "). */
export type HeaderList = Record<string, string>;

export type Decoded = {
  headers: HeaderList;
  /** The list's size as RFC 9113 counts it (name + value + 32 per field) was over the bound: `headers` is partial. */
  tooLarge: boolean;
  /** A field broke RFC 9113's rules for requests (fields.ts): the request is malformed. */
  malformed: boolean;
  /** The block holds a pseudo-header (never allowed in trailers). */
  pseudo: boolean;
};

/**
 * A header list with nothing beneath it: a field the peer names "constructor" or "__proto__" is
 * kept as sent, and a name it never sent reads as undefined. Built by `new` (V8 keeps such an object
 * in fast mode, where Object.create(null) makes a dictionary, measured at ~170 ns more per block).
 */
const NoPrototype = function (this: HeaderList) {} as unknown as new () => HeaderList;
NoPrototype.prototype = Object.create(null);

/** The per-entry overhead of RFC 7541 section 4.1. */
const ENTRY_OVERHEAD = 32;

export class HpackDecoder {
  /** Newest first; `names[i]`, `values[i]` and their sizes. */
  private names: string[] = [];
  private values: string[] = [];
  /** Whether each entry's name and value are of valid characters (fields.ts), checked once. */
  private valid: boolean[] = [];
  /** Whether the entry `field` last returned is of valid characters. */
  private fieldValid = true;
  private size = 0;
  private maxSize: number;
  /** Where the decoder is in the block being read. */
  private pos = 0;

  /**
   * @param limit the largest table size the peer may choose (our SETTINGS_HEADER_TABLE_SIZE)
   * @param maxListSize the header list size kept (our SETTINGS_MAX_HEADER_LIST_SIZE)
   */
  constructor(
    private readonly limit: number,
    private readonly maxListSize: number,
  ) {
    this.maxSize = limit;
  }

  /** The dynamic table's entries, newest first (tests). */
  entries(): [string, string][] {
    return this.names.map((name, i) => [name, this.values[i] as string]);
  }

  tableSize(): number {
    return this.size;
  }

  decode(block: Buffer, start = 0, end = block.length): Decoded {
    const headers = new NoPrototype();
    let listSize = 0;
    let tooLarge = false;
    let fields = 0;
    const check: FieldCheck = { regular: false, pseudo: false, malformed: false };
    this.pos = start;
    while (this.pos < end) {
      const byte = block[this.pos] as number;
      let name: string;
      let value: string;
      let valid: boolean;
      if (byte & 0x80) {
        // Indexed field.
        const index = this.integer(block, end, 7);
        [name, value] = this.field(index);
        valid = this.fieldValid;
      } else if ((byte & 0xe0) === 0x20) {
        // Dynamic table size update: only before the block's first field.
        if (fields > 0) throw new HpackError("a table size update after a field");
        const size = this.integer(block, end, 5);
        if (size > this.limit) throw new HpackError("a table size over the limit");
        this.maxSize = size;
        this.evict(0);
        continue;
      } else {
        // A literal: with incremental indexing (01), without (0000) or never indexed (0001).
        const indexing = (byte & 0xc0) === 0x40;
        const index = this.integer(block, end, indexing ? 6 : 4);
        name = index === 0 ? this.literal(block, end) : (this.field(index)[0] as string);
        value = this.literal(block, end);
        valid = (index !== 0 && this.fieldValid) || validName(name);
        valid = valid && validValue(value);
        if (indexing) this.insert(name, value, valid);
      }
      fields += 1;
      listSize += name.length + value.length + ENTRY_OVERHEAD;
      if (listSize > this.maxListSize) tooLarge = true;
      if (tooLarge) continue;
      const had = headers[name];
      checkField(check, name, value, had, valid);
      headers[name] = had === undefined ? value : `${had}${name === "cookie" ? "; " : ", "}${value}`;
    }
    const { malformed, pseudo } = check;
    return { headers: tooLarge ? new NoPrototype() : headers, tooLarge, malformed, pseudo };
  }

  /** An integer with an N-bit prefix (RFC 7541 section 5.1), at most 2^28: nothing larger is meaningful here. */
  private integer(block: Buffer, end: number, prefix: number): number {
    const max = (1 << prefix) - 1;
    let value = (block[this.pos++] as number) & max;
    if (value < max) return value;
    let shift = 0;
    for (;;) {
      if (this.pos >= end) throw new HpackError("a truncated integer");
      const byte = block[this.pos++] as number;
      value += (byte & 0x7f) * 2 ** shift;
      shift += 7;
      if ((byte & 0x80) === 0) break;
      if (shift > 21) throw new HpackError("an integer too large");
    }
    return value;
  }

  /** A string literal (RFC 7541 section 5.2). */
  private literal(block: Buffer, end: number): string {
    if (this.pos >= end) throw new HpackError("a truncated string");
    const huffman = ((block[this.pos] as number) & 0x80) !== 0;
    const length = this.integer(block, end, 7);
    const from = this.pos;
    const to = from + length;
    if (to > end) throw new HpackError("a truncated string");
    this.pos = to;
    if (!huffman) return block.toString("latin1", from, to);
    const decoded = huffmanDecode(block, from, to);
    if (decoded === undefined) throw new HpackError("an invalid Huffman string");
    return decoded;
  }

  private field(index: number): readonly [string, string] {
    if (index === 0) throw new HpackError("index 0");
    if (index <= STATIC.length) {
      this.fieldValid = true;
      return STATIC[index - 1] as readonly [string, string];
    }
    const i = index - STATIC.length - 1;
    if (i >= this.names.length) throw new HpackError("an index beyond the tables");
    this.fieldValid = this.valid[i] as boolean;
    return [this.names[i] as string, this.values[i] as string];
  }

  private insert(name: string, value: string, valid: boolean): void {
    const size = name.length + value.length + ENTRY_OVERHEAD;
    this.evict(size);
    // An entry larger than the table empties it and is not added (RFC 7541 section 4.4).
    if (size > this.maxSize) return;
    this.names.unshift(name);
    this.values.unshift(value);
    this.valid.unshift(valid);
    this.size += size;
  }

  /** Evicts the oldest entries until `room` more bytes fit. */
  private evict(room: number): void {
    while (this.size + room > this.maxSize && this.names.length > 0) {
      const name = this.names.pop() as string;
      const value = this.values.pop() as string;
      this.valid.pop();
      this.size -= name.length + value.length + ENTRY_OVERHEAD;
    }
  }
}
