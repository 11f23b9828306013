// The HPACK decoder of tollgate's own HTTP/2 against RFC 7541's Appendix C examples (fields alone,
// requests and responses, with and without Huffman coding, the dynamic table's growth and
// evictions), the Huffman code derived from its lengths against the RFC's codes, and blocks that
// must be refused. The Huffman table is also checked against nghttp2's encoder in h2-interop.test.ts.
import { describe, expect, it } from "vitest";
import { encodeBlock } from "../../src/frontends/envoy-grpc/h2/encode.js";
import { HpackDecoder, HpackError } from "../../src/frontends/envoy-grpc/h2/hpack.js";
import { CODE_LENGTHS, huffmanCodes, huffmanDecode } from "../../src/frontends/envoy-grpc/h2/huffman.js";

const hex = (text: string) => Buffer.from(text.replace(/\s+/g, ""), "hex");

describe("HPACK field representations (RFC 7541 C.2)", () => {
  it("adds a literal with incremental indexing to the dynamic table (C.2.1)", () => {
    const decoder = new HpackDecoder(4096, 65536);
    const block = hex("400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572");
    expect(decoder.decode(block).headers).toEqual({ "custom-key": "custom-header" });
    expect(decoder.entries()).toEqual([["custom-key", "custom-header"]]);
    expect(decoder.tableSize()).toBe(55);
  });

  it("leaves the table alone for literals without indexing and never indexed (C.2.2, C.2.3)", () => {
    const decoder = new HpackDecoder(4096, 65536);
    expect(decoder.decode(hex("040c 2f73 616d 706c 652f 7061 7468")).headers).toEqual({
      ":path": "/sample/path",
    });
    expect(decoder.decode(hex("1008 7061 7373 776f 7264 0673 6563 7265 74")).headers).toEqual({
      password: "secret",
    });
    expect(decoder.entries()).toEqual([]);
  });

  it("reads an indexed field of the static table (C.2.4)", () => {
    expect(new HpackDecoder(4096, 65536).decode(hex("82")).headers).toEqual({ ":method": "GET" });
  });
});

const REQUESTS = [
  { ":method": "GET", ":scheme": "http", ":path": "/", ":authority": "www.example.com" },
  {
    ":method": "GET",
    ":scheme": "http",
    ":path": "/",
    ":authority": "www.example.com",
    "cache-control": "no-cache",
  },
  {
    ":method": "GET",
    ":scheme": "https",
    ":path": "/index.html",
    ":authority": "www.example.com",
    "custom-key": "custom-value",
  },
];
const REQUEST_TABLES = [
  [[":authority", "www.example.com"]],
  [
    ["cache-control", "no-cache"],
    [":authority", "www.example.com"],
  ],
  [
    ["custom-key", "custom-value"],
    ["cache-control", "no-cache"],
    [":authority", "www.example.com"],
  ],
];
const REQUEST_SIZES = [57, 110, 164];

describe.each([
  {
    name: "without Huffman coding (C.3)",
    blocks: [
      "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
      "8286 84be 5808 6e6f 2d63 6163 6865",
      "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
    ],
  },
  {
    name: "with Huffman coding (C.4)",
    blocks: [
      "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
      "8286 84be 5886 a8eb 1064 9cbf",
      "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
    ],
  },
])("three requests on one connection, $name", ({ blocks }) => {
  it("decodes each list and grows the dynamic table as the RFC shows", () => {
    const decoder = new HpackDecoder(4096, 65536);
    blocks.forEach((block, i) => {
      expect(decoder.decode(hex(block)).headers).toEqual(REQUESTS[i]);
      expect(decoder.entries()).toEqual(REQUEST_TABLES[i]);
      expect(decoder.tableSize()).toBe(REQUEST_SIZES[i]);
    });
  });
});

const DATE1 = "Mon, 21 Oct 2013 20:13:21 GMT";
const DATE2 = "Mon, 21 Oct 2013 20:13:22 GMT";
const LOCATION = "https://www.example.com";
const COOKIE = "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1";
const RESPONSES = [
  { ":status": "302", "cache-control": "private", date: DATE1, location: LOCATION },
  { ":status": "307", "cache-control": "private", date: DATE1, location: LOCATION },
  {
    ":status": "200",
    "cache-control": "private",
    date: DATE2,
    location: LOCATION,
    "content-encoding": "gzip",
    "set-cookie": COOKIE,
  },
];
const RESPONSE_TABLES = [
  [
    ["location", LOCATION],
    ["date", DATE1],
    ["cache-control", "private"],
    [":status", "302"],
  ],
  [
    [":status", "307"],
    ["location", LOCATION],
    ["date", DATE1],
    ["cache-control", "private"],
  ],
  [
    ["set-cookie", COOKIE],
    ["content-encoding", "gzip"],
    ["date", DATE2],
  ],
];
const RESPONSE_SIZES = [222, 222, 215];

describe.each([
  {
    name: "without Huffman coding (C.5)",
    blocks: [
      `4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133
       2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70 6c65 2e63 6f6d`,
      "4803 3330 37c1 c0bf",
      `88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d
       54c0 5a04 677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049
       5541 5851 5745 4f49 553b 206d 6178 2d61 6765 3d33 3630 303b 2076 6572 7369 6f6e 3d31`,
    ],
  },
  {
    name: "with Huffman coding (C.6)",
    blocks: [
      `4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6
       2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3`,
      "4883 640e ffc1 c0bf",
      `88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab
       77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f
       9587 3160 65c0 03ed 4ee5 b106 3d50 07`,
    ],
  },
])("three responses with a 256-byte table, $name", ({ blocks }) => {
  it("decodes each list and evicts the oldest entries as the RFC shows", () => {
    const decoder = new HpackDecoder(256, 65536);
    blocks.forEach((block, i) => {
      expect(decoder.decode(hex(block)).headers).toEqual(RESPONSES[i]);
      expect(decoder.entries()).toEqual(RESPONSE_TABLES[i]);
      expect(decoder.tableSize()).toBe(RESPONSE_SIZES[i]);
    });
  });
});

describe("the Huffman code", () => {
  it("derives the RFC's codes from the code lengths", () => {
    const codes = huffmanCodes();
    expect(CODE_LENGTHS).toHaveLength(257);
    // A sample of Appendix B: the first symbols, the shortest and longest codes, EOS.
    const rfc: [number, number][] = [
      [0, 0x1ff8],
      [1, 0x7fffd8],
      [2, 0xfffffe2],
      [9, 0xffffea],
      [10, 0x3ffffffc],
      [32, 0x14],
      [48, 0x0],
      [97, 0x3],
      [116, 0x9],
      [127, 0xffffffc],
      [128, 0xfffe6],
      [200, 0x3ffffe2],
      [255, 0x3ffffee],
      [256, 0x3fffffff],
    ];
    for (const [symbol, code] of rfc) expect(codes[symbol], `symbol ${symbol}`).toBe(code);
    // A complete prefix code: the lengths fill the code space exactly (Kraft's equality).
    expect(CODE_LENGTHS.reduce((sum, length) => sum + 2 ** -length, 0)).toBe(1);
  });

  it("decodes symbol 0 (which node's client cannot send in a header) and refuses bad padding and EOS", () => {
    // Symbol 0 (13 bits, 0x1ff8) then three 1-bits of padding: 1111111111000111.
    expect(huffmanDecode(Buffer.from([0xff, 0xc7]), 0, 2)).toBe("\u0000");
    // Padding of 8 bits or more, padding that is not all ones, and EOS itself are errors (RFC 7541 5.2).
    expect(huffmanDecode(Buffer.from([0x1f, 0xff]), 0, 2)).toBeUndefined();
    expect(huffmanDecode(Buffer.from([0x00]), 0, 1)).toBeUndefined();
    expect(huffmanDecode(Buffer.from([0xff, 0xff, 0xff, 0xff]), 0, 4)).toBeUndefined();
    // '0' (00000) and 'a' (00011), each with three bits of padding.
    expect(huffmanDecode(Buffer.from([0x07]), 0, 1)).toBe("0");
    expect(huffmanDecode(Buffer.from([0x1f]), 0, 1)).toBe("a");
  });
});

describe("blocks the decoder refuses", () => {
  const refuses = (block: Buffer, limit = 4096) =>
    expect(() => new HpackDecoder(limit, 65536).decode(block)).toThrow(HpackError);

  it("refuses index 0, an index beyond both tables, truncated strings and integers", () => {
    refuses(hex("80"));
    refuses(hex("be"));
    refuses(hex("400a 6375"));
    refuses(hex("ff"));
    refuses(hex("ff ff ff ff ff 7f"));
  });

  it("takes a table size update only at the start of a block and within SETTINGS_HEADER_TABLE_SIZE", () => {
    const decoder = new HpackDecoder(4096, 65536);
    decoder.decode(hex("400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572"));
    // A size of 0 empties the table.
    expect(decoder.decode(hex("20 82")).headers).toEqual({ ":method": "GET" });
    expect(decoder.entries()).toEqual([]);
    refuses(hex("82 20"));
    // 31 + 98 + 31 × 128 = 4097 is over the limit; 4096 is the limit itself.
    refuses(hex("3f e2 1f"));
    expect(new HpackDecoder(4096, 65536).decode(hex("3f e1 1f 82")).headers).toEqual({ ":method": "GET" });
  });

  it("decodes an over-size list whole but keeps none of it", () => {
    const decoder = new HpackDecoder(4096, 100);
    const big = encodeBlock([["x-big", "a".repeat(200)]]);
    const result = decoder.decode(Buffer.concat([hex("82"), big]));
    expect(result).toMatchObject({ headers: {}, tooLarge: true });
    // The next block still decodes: nothing of the table was skipped.
    expect(decoder.decode(hex("82")).headers).toEqual({ ":method": "GET" });
  });
});

describe("the encoder's blocks", () => {
  it("decode to the fields given", () => {
    const fields = [
      [":status", "200"],
      ["content-type", "application/grpc"],
      ["grpc-status", "16"],
      ["grpc-message", "x".repeat(300)],
    ] as const;
    expect(new HpackDecoder(4096, 65536).decode(encodeBlock(fields)).headers).toEqual(
      Object.fromEntries(fields),
    );
    expect(new HpackDecoder(4096, 65536).decode(encodeBlock([[":status", "415"]])).headers).toEqual({
      ":status": "415",
    });
  });
});
