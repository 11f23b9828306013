import { describe, expect, it } from "vitest";
import { newSessionId, newUserId } from "../../src/auth/ids.js";

describe("the ids tollgate issues", () => {
  it("never starts a session id with '-', which a command line would read as an option", () => {
    // One draw in 64 would start with '-': 10,000 draws all but certainly include some.
    const ids = Array.from({ length: 10_000 }, newSessionId);
    expect(ids.filter((id) => id.startsWith("-"))).toEqual([]);
    for (const id of ids.slice(0, 100)) expect(id).toMatch(/^[A-Za-z0-9_][A-Za-z0-9_-]{21}$/);
    expect(new Set(ids).size).toBe(ids.length);
  });

  it("makes user ids of a fixed shape", () => {
    expect(newUserId()).toMatch(/^usr_[0-9a-f]{16}$/);
  });
});
