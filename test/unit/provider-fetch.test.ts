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

  it("keeps the default interval for no-cache and no-store, which Keycloak sends on every answer", () => {
    expect(keepForMs("no-cache")).toBeUndefined();
    expect(keepForMs("no-store, no-cache")).toBeUndefined();
    expect(keepForMs("public, max-age=600, no-cache")).toBe(600_000);
  });

  it("reads a max-age that is not a number of seconds as none, not as its leading digits", () => {
    expect(keepForMs("max-age=1e9")).toBeUndefined();
    expect(keepForMs("max-age=-5")).toBeUndefined();
    expect(keepForMs("max-age=")).toBeUndefined();
    expect(keepForMs("max-age")).toBeUndefined();
  });
});
