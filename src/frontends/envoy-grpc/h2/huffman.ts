// HPACK's Huffman code (RFC 7541 Appendix B) and a decoder for it. The code is canonical (codes of
// one length are consecutive, in symbol order, shorter lengths first), so the table is its 257 code
// lengths and the codes are derived from them; the decoder walks a 4-bit state table built once.

/** The code length in bits of each symbol 0..255 and of EOS (256), from RFC 7541 Appendix B. */
// biome-ignore format: one row of 16 symbols per line
export const CODE_LENGTHS: readonly number[] = [
  13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28,
  28, 28, 28, 28, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 28,
  6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6,
  5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10,
  13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7,
  7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6,
  15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6, 6, 5,
  6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28,
  20, 22, 20, 20, 22, 22, 22, 23, 22, 23, 23, 23, 23, 23, 24, 23,
  24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24,
  22, 21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23,
  21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22, 23,
  26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25,
  19, 21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27,
  20, 24, 20, 21, 22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23,
  26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26,
  30,
];

const EOS = 256;

/** Each symbol's code, LSB-aligned, derived canonically from CODE_LENGTHS. */
export function huffmanCodes(): number[] {
  const order = CODE_LENGTHS.map((length, symbol) => ({ length, symbol })).sort(
    (a, b) => a.length - b.length || a.symbol - b.symbol,
  );
  const codes = new Array<number>(CODE_LENGTHS.length).fill(0);
  let code = 0;
  let length = order[0]?.length ?? 0;
  for (const entry of order) {
    code *= 2 ** (entry.length - length);
    length = entry.length;
    codes[entry.symbol] = code;
    code += 1;
  }
  return codes;
}

// The decoding automaton: states are the code tree's internal nodes (the root is 0); reading a
// nibble from a state gives the next state and at most one symbol (no code is shorter than 5 bits).
const EMIT = 1 << 9;
const FAIL = 1 << 10;
/** In TRANSITIONS: next state (bits 0-8), EMIT and the symbol (bits 11-18), or FAIL. */
const TRANSITIONS = new Int32Array(256 * 16);
/** A state where the input may end: the path from the root is at most 7 one-bits (EOS's prefix). */
const ACCEPTS = new Uint8Array(256);

function buildAutomaton(): void {
  // The tree as arrays: children of internal node n at child[2n], child[2n+1]; a leaf is -1 - symbol.
  const child = new Int32Array(512).fill(0);
  let nodes = 1;
  const codes = huffmanCodes();
  for (let symbol = 0; symbol <= EOS; symbol++) {
    const length = CODE_LENGTHS[symbol] as number;
    const code = codes[symbol] as number;
    let node = 0;
    for (let bit = length - 1; bit >= 0; bit--) {
      const slot = 2 * node + (Math.floor(code / 2 ** bit) % 2);
      if (bit === 0) child[slot] = -1 - symbol;
      else {
        if (child[slot] === 0) child[slot] = nodes++;
        node = child[slot] as number;
      }
    }
  }
  // Which states are all-ones prefixes of at most 7 bits.
  ACCEPTS[0] = 1;
  let ones = 0;
  for (let depth = 1; depth <= 7; depth++) {
    ones = child[2 * ones + 1] as number;
    ACCEPTS[ones] = 1;
  }
  for (let state = 0; state < nodes; state++) {
    for (let nibble = 0; nibble < 16; nibble++) {
      let node = state;
      let out = 0;
      for (let bit = 3; bit >= 0; bit--) {
        const next = child[2 * node + ((nibble >> bit) & 1)] as number;
        if (next >= 0) {
          node = next;
          continue;
        }
        const symbol = -1 - next;
        if (symbol === EOS) {
          out = FAIL;
          break;
        }
        out = EMIT | (symbol << 11);
        node = 0;
      }
      TRANSITIONS[state * 16 + nibble] = out === FAIL ? FAIL : out | node;
    }
  }
}
buildAutomaton();

/** Room for a decoded string: the shortest code is 5 bits, so n bytes decode to at most 8n/5 bytes. */
let scratch = Buffer.allocUnsafe(4096);

/** The string a Huffman-coded literal holds (latin1, a byte per character), or undefined when it is invalid. */
export function huffmanDecode(input: Buffer, start: number, end: number): string | undefined {
  const most = Math.ceil(((end - start) * 8) / 5);
  if (most > scratch.length) scratch = Buffer.allocUnsafe(most);
  const out = scratch;
  let length = 0;
  let state = 0;
  for (let i = start; i < end; i++) {
    const byte = input[i] as number;
    let t = TRANSITIONS[state * 16 + (byte >> 4)] as number;
    if (t & FAIL) return undefined;
    if (t & EMIT) out[length++] = (t >> 11) & 0xff;
    state = t & 0x1ff;
    t = TRANSITIONS[state * 16 + (byte & 0xf)] as number;
    if (t & FAIL) return undefined;
    if (t & EMIT) out[length++] = (t >> 11) & 0xff;
    state = t & 0x1ff;
  }
  if (ACCEPTS[state] !== 1) return undefined;
  return out.toString("latin1", 0, length);
}
