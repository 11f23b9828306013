// The rate limit service's hand-written codec against protobufjs on the .proto files (the schema):
// every random RateLimitRequest protobufjs writes reads the same, every answer written reads back
// field for field, and random bytes fail only as INVALID_ARGUMENT.
import { isUtf8 } from "node:buffer";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { GrpcError } from "../../src/frontends/envoy-grpc/grpc-protocol.js";
import { messages } from "../../src/frontends/envoy-grpc/protos.js";
import {
  type RlsAnswer,
  readRateLimitRequest,
  writeRateLimitResponse,
} from "../../src/frontends/envoy-grpc/rls-codec.js";
import { subjectOf } from "../../src/rls/match.js";
import type { RlsLimit } from "../../src/rls/model.js";

const anyText = fc.string({ unit: "grapheme", maxLength: 24 });
const u32 = fc.integer({ min: 0, max: 2 ** 32 - 1 });

const descriptorArb = fc.record({
  entries: fc.array(fc.record({ key: anyText, value: anyText }), { maxLength: 4 }),
  limit: fc.option(fc.record({ requests_per_unit: u32, unit: fc.integer({ min: 0, max: 7 }) }), {
    nil: undefined,
  }),
  hits_addend: fc.option(fc.record({ value: fc.integer({ min: 0, max: 2 ** 40 }) }), { nil: undefined }),
  is_negative_hits: fc.boolean(),
});
const requestArb = fc.record({
  domain: anyText,
  descriptors: fc.array(descriptorArb, { maxLength: 5 }),
  hits_addend: u32,
});

describe("the RateLimitRequest reader", () => {
  it("reads every random request protobufjs writes as protobufjs reads it", () => {
    fc.assert(
      fc.property(requestArb, (request) => {
        const bytes = messages.RateLimitRequest.encode(
          messages.RateLimitRequest.fromObject(request),
        ).finish();
        const read = readRateLimitRequest(bytes);
        const theirs = messages.RateLimitRequest.toObject(messages.RateLimitRequest.decode(bytes), {
          longs: Number,
          defaults: true,
        }) as {
          domain: string;
          hits_addend: number;
          descriptors: {
            entries: { key: string; value: string }[];
            limit?: { requests_per_unit: number; unit: number } | null;
            hits_addend?: { value: number } | null;
            is_negative_hits: boolean;
          }[];
        };
        expect(read.domain).toBe(theirs.domain);
        expect(read.hits_addend).toBe(theirs.hits_addend);
        expect(read.descriptors).toHaveLength(theirs.descriptors.length);
        theirs.descriptors.forEach((d, i) => {
          const mine = read.descriptors?.[i];
          expect(mine?.entries).toEqual(d.entries);
          expect(mine?.limit ?? null).toEqual(d.limit ?? null);
          expect(mine?.hits_addend?.value ?? null).toEqual(d.hits_addend?.value ?? null);
          expect(mine?.is_negative_hits).toBe(d.is_negative_hits);
        });
      }),
      { numRuns: 500 },
    );
  });

  it("fails random bytes only with INVALID_ARGUMENT", () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 200 }), (bytes) => {
        try {
          readRateLimitRequest(bytes);
        } catch (error) {
          expect(error).toBeInstanceOf(GrpcError);
          expect((error as GrpcError).code).toBe(3);
        }
      }),
      { numRuns: 2000 },
    );
  });
});

describe("a string that is not UTF-8", () => {
  const ascii = (text: string): number[] => [...Buffer.from(text)];
  const varint = (n: number): number[] => (n < 0x80 ? [n] : [(n & 0x7f) | 0x80, ...varint(n >>> 7)]);
  const field = (number: number, bytes: readonly number[] | Buffer): Buffer =>
    Buffer.concat([Buffer.from([(number << 3) | 2, ...varint(bytes.length)]), Buffer.from(bytes)]);
  /** A request of domain "d" and one descriptor of one entry, key "k", whose value is these bytes. */
  const readValue = (bytes: readonly number[] | Buffer): string | undefined => {
    const entry = Buffer.concat([field(1, ascii("k")), field(2, bytes)]);
    const request = Buffer.concat([field(1, ascii("d")), field(2, field(1, entry))]);
    return readRateLimitRequest(request).descriptors?.[0]?.entries?.[0]?.value;
  };
  /** The same, worked out slowly: at each byte, the shortest run that is UTF-8, else the byte alone. */
  const slowly = (bytes: readonly number[]): string => {
    const buf = Buffer.from(bytes);
    let out = "";
    for (let at = 0; at < buf.length; ) {
      const length = [1, 2, 3, 4].find((n) => at + n <= buf.length && isUtf8(buf.subarray(at, at + n)));
      out +=
        length === undefined
          ? String.fromCharCode(0xdc00 + (buf[at] as number))
          : buf.toString("utf8", at, at + length);
      at += length ?? 1;
    }
    return out;
  };

  /** subjectOf reads only a limit's shared patterns (none here). */
  const rule = { sharedPatterns: [] } as unknown as RlsLimit;

  it("keeps two values apart that differ only in bytes that are not UTF-8, as their bytes do", () => {
    const values = [[0xff], [0xfe], [0xc3], [0xe2, 0x82], [0xef, 0xbf, 0xbd], [0x61, 0x80, 0xc3, 0xa9]].map(
      readValue,
    );
    expect(values).toEqual(["\udcff", "\udcfe", "\udcc3", "\udce2\udc82", "\ufffd", "a\udc80\u00e9"]);
    expect(new Set(values).size).toBe(values.length);
    expect(subjectOf("d", { entries: [{ key: "k", value: values[0] as string }] }, rule)).not.toBe(
      subjectOf("d", { entries: [{ key: "k", value: values[1] as string }] }, rule),
    );
  });

  it("reads any bytes as the slow way does: each whole character, each other byte on its own", () => {
    // Bytes around UTF-8's edges: lead bytes, continuation bytes, and the bounds E0, ED, F0 and F4 narrow.
    const edgy = fc.constantFrom(
      0x00,
      0x41,
      0x7f,
      0x80,
      0x8f,
      0x90,
      0x9f,
      0xa0,
      0xbf,
      0xc0,
      0xc2,
      0xdf,
      0xe0,
      0xe1,
      0xed,
      0xef,
      0xf0,
      0xf4,
      0xf5,
      0xff,
    );
    fc.assert(
      fc.property(fc.array(fc.oneof(edgy, fc.integer({ min: 0, max: 255 })), { maxLength: 24 }), (bytes) => {
        expect(readValue(bytes)).toBe(slowly(bytes));
      }),
      { numRuns: 5000 },
    );
  });

  it("reads a 4 MiB value of such bytes in one pass, not one look per byte", () => {
    const started = performance.now();
    expect(readValue(Buffer.alloc(4 * 1024 * 1024 - 64, 0xff))).toHaveLength(4 * 1024 * 1024 - 64);
    // One pass takes tens of milliseconds; a look per byte took seconds.
    expect(performance.now() - started).toBeLessThan(1000);
  });
});

describe("the RateLimitResponse writer", () => {
  it("writes answers protobufjs reads back field for field", () => {
    const statusArb = fc.record(
      {
        code: fc.constantFrom(0, 1, 2),
        current_limit: fc.record({
          name: anyText,
          requests_per_unit: u32,
          unit: fc.integer({ min: 0, max: 7 }),
        }),
        limit_remaining: u32,
        duration_until_reset: fc.record({
          seconds: fc.integer({ min: 0, max: 40_000_000 }),
          nanos: fc.integer({ min: 0, max: 999_999_999 }),
        }),
      },
      { requiredKeys: ["code", "limit_remaining"] },
    );
    fc.assert(
      fc.property(
        fc.constantFrom(0, 1, 2),
        fc.array(statusArb, { maxLength: 5 }),
        fc.option(fc.array(fc.record({ key: anyText, value: anyText }), { maxLength: 3 }), {
          nil: undefined,
        }),
        (overall, statuses, headers) => {
          const answer = {
            overall_code: overall,
            statuses,
            ...(headers === undefined ? {} : { response_headers_to_add: headers }),
          } as RlsAnswer;
          const bytes = writeRateLimitResponse(answer).bytes;
          expect(bytes.readUInt32BE(1)).toBe(bytes.length - 5);
          const decoded = messages.RateLimitResponse.toObject(
            messages.RateLimitResponse.decode(bytes.subarray(5)),
            {
              longs: Number,
              defaults: true,
            },
          );
          const expected = messages.RateLimitResponse.toObject(
            messages.RateLimitResponse.decode(messages.RateLimitResponse.encode(answer).finish()),
            { longs: Number, defaults: true },
          );
          expect(decoded).toEqual(expected);
        },
      ),
      { numRuns: 500 },
    );
  });
});
