// The one grammar of whole numbers written as text: what it takes, and the lenient forms it refuses.
import { describe, expect, it } from "vitest";
import { parseWholeNumber } from "../../src/config/numbers.js";

describe("parseWholeNumber", () => {
  it("takes decimal digits within the range", () => {
    expect(parseWholeNumber("0", 0, 10)).toBe(0);
    expect(parseWholeNumber("7", 1, 10)).toBe(7);
    expect(parseWholeNumber("500", 1, 500)).toBe(500);
    expect(parseWholeNumber("9007199254740991", 0, Number.MAX_SAFE_INTEGER)).toBe(Number.MAX_SAFE_INTEGER);
  });

  it("refuses hex, exponents, signs, spaces, fractions, leading zeros and other digits", () => {
    for (const text of [
      "0x10",
      "0X10",
      "0b1",
      "0o7",
      "1e3",
      "1E3",
      "+5",
      "-5",
      " 5",
      "5 ",
      "\t5",
      "5\n",
      "5.0",
      "5.",
      ".5",
      "010",
      "00",
      "",
      "1_000",
      "1,000",
      "Infinity",
      "NaN",
      "５",
      "٥",
    ]) {
      expect(parseWholeNumber(text, 0, 1_000_000), JSON.stringify(text)).toBeUndefined();
    }
  });

  it("refuses numbers outside the range, however many digits, never rounding them into it", () => {
    expect(parseWholeNumber("0", 1, 10)).toBeUndefined();
    expect(parseWholeNumber("11", 1, 10)).toBeUndefined();
    expect(parseWholeNumber("9007199254740992", 0, Number.MAX_SAFE_INTEGER)).toBeUndefined();
    expect(parseWholeNumber("99999999999999999999", 1, 500)).toBeUndefined();
    expect(parseWholeNumber("1".repeat(400), 1, 500)).toBeUndefined();
  });
});
