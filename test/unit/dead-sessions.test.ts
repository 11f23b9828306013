// The dead-session memory: bounded, and forgetting a session once its token has expired.
import { describe, expect, it } from "vitest";
import { createDeadSessions } from "../../src/check/dead-sessions.js";

describe("dead sessions", () => {
  it("remember a session until its token's expiry", () => {
    const dead = createDeadSessions({ maxEntries: 10 });
    dead.add("s1", 2_000);
    expect(dead.has("s1", 1_999)).toBe(true);
    expect(dead.has("s1", 2_000)).toBe(false);
    expect(dead.has("s2", 0)).toBe(false);
  });

  it("forget the oldest first when full, and never hold more than the bound", () => {
    const dead = createDeadSessions({ maxEntries: 2 });
    for (const sid of ["a", "b", "c"]) dead.add(sid, 10_000);
    expect(["a", "b", "c"].map((sid) => dead.has(sid, 0))).toEqual([false, true, true]);
  });
});
