// POST /json's reading of a RateLimitRequest: uint32 and UInt64Value fields and units as protobuf's
// JSON mapping writes them, and nothing else.
import { describe, expect, it } from "vitest";
import { jsonRequest } from "../../src/frontends/rls-json.js";

const request = (descriptor: Record<string, unknown>, top: Record<string, unknown> = {}) =>
  jsonRequest({ domain: "d", descriptors: [{ entries: [{ key: "k", value: "v" }], ...descriptor }], ...top });

describe("jsonRequest", () => {
  it("reads uint32 fields as JSON numbers or decimal strings, and units by name or number", () => {
    const read = request(
      { limit: { requestsPerUnit: "10", unit: "MINUTE" }, hitsAddend: 3 },
      { hitsAddend: "2" },
    );
    expect(read).toMatchObject({
      descriptors: [{ limit: { requestsPerUnit: 10, unit: "minute" } }],
      addends: [3],
    });
    expect(request({ limit: { requests_per_unit: 4294967295, unit: 7 } })).toMatchObject({
      descriptors: [{ limit: { requestsPerUnit: 4294967295, unit: "week" } }],
    });
    expect(request({}, { hitsAddend: "4294967295" })).toMatchObject({ addends: [4294967295] });
  });

  it("refuses 400 a uint32 past 2^32 - 1 or written leniently, rather than rounding or reading it", () => {
    for (const value of [
      "4294967296",
      4294967296,
      1e20,
      "99999999999999999999",
      "010",
      " 5",
      "+5",
      "0x10",
      "1e3",
      "5.0",
      -1,
      1.5,
      "",
      true,
    ]) {
      expect(request({ limit: { requestsPerUnit: value, unit: "SECOND" } }), JSON.stringify(value)).toMatch(
        /^descriptors\[0\]\.limit needs requestsPerUnit \(a whole number from 0 to 4294967295/,
      );
      expect(request({}, { hitsAddend: value }), JSON.stringify(value)).toMatch(
        /^hitsAddend must be a whole number from 0 to 4294967295/,
      );
    }
  });

  it("takes a descriptor's hits_addend up to 2^64 - 1 (a UInt64Value), counted as at most 2^32 - 1", () => {
    expect(request({ hitsAddend: "18446744073709551615" })).toMatchObject({ addends: [4294967295] });
    expect(request({ hitsAddend: 5e9 })).toMatchObject({ addends: [4294967295] });
    for (const value of ["18446744073709551616", "018", "1e3", -1]) {
      expect(request({ hitsAddend: value }), JSON.stringify(value)).toMatch(
        /^descriptors\[0\]\.hitsAddend must be/,
      );
    }
  });

  it('reads a field left out or null as its proto3 default, as protojson does: key and value "", requestsPerUnit 0', () => {
    const entries = (list: unknown[]) => jsonRequest({ domain: "d", descriptors: [{ entries: list }] });
    expect(entries([{ value: "v" }, { key: "k" }, { key: null, value: null }, {}])).toMatchObject({
      descriptors: [
        {
          entries: [
            { key: "", value: "v" },
            { key: "k", value: "" },
            { key: "", value: "" },
            { key: "", value: "" },
          ],
        },
      ],
    });
    for (const limit of [{ unit: "MINUTE" }, { unit: "MINUTE", requestsPerUnit: null }]) {
      expect(request({ limit }), JSON.stringify(limit)).toMatchObject({
        descriptors: [{ limit: { requestsPerUnit: 0, unit: "minute" } }],
      });
    }
    // What protojson refuses stays refused: an entry that is no object, a key or value that is no string.
    expect(entries([null])).toBe("descriptors[0].entries[0] must be an object");
    expect(entries([[]])).toBe("descriptors[0].entries[0] must be an object");
    for (const entry of [
      { key: 5, value: "v" },
      { key: "k", value: true },
    ]) {
      expect(entries([entry]), JSON.stringify(entry)).toBe(
        "descriptors[0].entries[0] needs a string key and value",
      );
    }
  });

  it("refuses a unit that is no unit: UNKNOWN, a number past WEEK, another spelling", () => {
    for (const unit of [0, 8, 2.5, "UNKNOWN", "minute", "Minute", "", null]) {
      expect(request({ limit: { requestsPerUnit: 1, unit } }), JSON.stringify(unit)).toMatch(
        /needs requestsPerUnit .* and a unit/,
      );
    }
  });
});
