// The caches keyed by a token's whole text: bounded by count and by the tokens' total length, the
// oldest entry going first, so that long provider tokens cannot make them hold more than short ones.
import { describe, expect, it } from "vitest";
import { createTokenCache } from "../../src/auth/token-cache.js";

describe("a token cache", () => {
  it("holds no more than its count, dropping the oldest first", () => {
    const cache = createTokenCache<number>({ maxEntries: 3, maxChars: 1_000 });
    for (const [i, token] of ["a", "b", "c", "d"].entries()) cache.set(token, i);
    expect(cache.size).toBe(3);
    expect(cache.get("a")).toBeUndefined();
    expect(cache.get("d")).toBe(3);
  });

  it("holds no more than its length in tokens, however few they are", () => {
    const cache = createTokenCache<number>({ maxEntries: 100, maxChars: 40 });
    for (let i = 0; i < 10; i += 1) cache.set(`${i}`.repeat(16), i);
    // 16 characters each: two fit in 40.
    expect(cache.size).toBe(2);
    expect(cache.get("9".repeat(16))).toBe(9);
    expect(cache.get("8".repeat(16))).toBe(8);
    // One longer than the whole bound is never kept, and leaves the others.
    cache.set("x".repeat(41), 0);
    expect(cache.size).toBe(2);
    cache.delete("9".repeat(16));
    cache.set("y".repeat(24), 1);
    expect(cache.size).toBe(2);
  });

  it("counts a token set twice once", () => {
    const cache = createTokenCache<number>({ maxEntries: 2, maxChars: 20 });
    cache.set("t".repeat(10), 1);
    cache.set("t".repeat(10), 2);
    cache.set("u".repeat(10), 3);
    expect(cache.size).toBe(2);
    expect(cache.get("t".repeat(10))).toBe(2);
    cache.clear();
    expect(cache.size).toBe(0);
  });
});
