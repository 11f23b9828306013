import { describe, expect, it } from "vitest";
import { keepForMs } from "../../src/auth/provider-fetch.js";

describe("how long a JWKS answer's Cache-Control lets it be kept", () => {
  it.each([
    [null, undefined],
    ["public", undefined],
    ["public, max-age=3600", 3_600_000],
    ['max-age="120"', 120_000],
    ["MAX-AGE = 90, must-revalidate", 90_000],
    ["max-age=0", 0],
    // A shared cache's own max-age is not this one.
    ["s-maxage=600", undefined],
  ])("%j → %j", (header, ms) => {
    expect(keepForMs(header)).toBe(ms);
  });

  it("keeps an answer that must not be stored or reused without asking for no time", () => {
    expect(keepForMs("no-store")).toBe(0);
    expect(keepForMs("public, max-age=86400, no-cache")).toBe(0);
    expect(keepForMs("No-Store, max-age=600")).toBe(0);
  });

  it("reads a max-age that is not a number of seconds as stale, not as its leading digits", () => {
    expect(keepForMs("max-age=1e9")).toBe(0);
    expect(keepForMs("max-age=-5")).toBe(0);
    expect(keepForMs("max-age=")).toBe(0);
    expect(keepForMs("max-age")).toBe(0);
  });
});
