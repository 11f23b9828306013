// The contract every rate-limit store honours; run unchanged against the memory and Redis stores.
import { afterAll, beforeEach, describe, expect, it } from "vitest";
import type { RateLimitStore, Rule } from "../../src/ratelimit/types.js";

export type ContractHarness = {
  /** A store whose clock is `now()` in ms. */
  create(now: () => number): Promise<{ store: RateLimitStore; close(): Promise<void> }>;
};

const T0 = 1_700_000_000_000;

export function describeRateLimitContract(name: string, harness: ContractHarness): void {
  describe(`rate-limit store contract: ${name}`, () => {
    let now = T0;
    let store: RateLimitStore;
    const closers: (() => Promise<void>)[] = [];
    let subjectCounter = 0;
    let subject = "";

    beforeEach(async () => {
      now = T0;
      subjectCounter += 1;
      subject = `u:contract-${subjectCounter}-${Math.random().toString(36).slice(2, 8)}`;
      const created = await harness.create(() => now);
      store = created.store;
      closers.push(created.close);
    });
    afterAll(async () => {
      for (const close of closers) await close();
    });

    const rule: Rule = { limit: 3, windowMs: 10_000 };

    it("allows exactly `limit` requests, then denies with the window's state", async () => {
      const results = [];
      for (let i = 0; i < 5; i += 1) {
        now = T0 + i * 100;
        results.push(await store.hit(subject, "general", rule));
      }
      expect(results.map((r) => r.allowed)).toEqual([true, true, true, false, false]);
      expect(results.map((r) => r.used)).toEqual([1, 2, 3, 3, 3]);
      expect(results.map((r) => r.remaining)).toEqual([2, 1, 0, 0, 0]);
      expect(results[0]).toMatchObject({ limit: 3, resetAtMs: T0 + 10_000, retryAfterMs: 0 });
      expect(results[3]).toMatchObject({ resetAtMs: T0 + 10_000, retryAfterMs: 10_000 - 300 });
      expect(results[4]?.retryAfterMs).toBe(10_000 - 400);
    });

    it("lets one more request in when the oldest entry leaves, and only one", async () => {
      for (let i = 0; i < 3; i += 1) {
        now = T0 + i * 1000;
        await store.hit(subject, "general", rule);
      }
      now = T0 + 9_999;
      expect((await store.hit(subject, "general", rule)).allowed).toBe(false);
      now = T0 + 10_000;
      const freed = await store.hit(subject, "general", rule);
      expect(freed).toMatchObject({ allowed: true, used: 3, remaining: 0, resetAtMs: T0 + 11_000 });
      const next = await store.hit(subject, "general", rule);
      expect(next).toMatchObject({ allowed: false, retryAfterMs: 1_000 });
    });

    it("does not record denied requests", async () => {
      for (let i = 0; i < 3; i += 1) await store.hit(subject, "general", rule);
      for (let i = 0; i < 50; i += 1) {
        now = T0 + 1 + i * 100;
        expect((await store.hit(subject, "general", rule)).allowed).toBe(false);
      }
      now = T0 + 10_000;
      const after = await Promise.all([1, 2, 3, 4].map(() => store.hit(subject, "general", rule)));
      expect(after.filter((r) => r.allowed)).toHaveLength(3);
    });

    it("refuses the double-window burst that a fixed window would let through", async () => {
      // Fill the limit late in one fixed window, then try again just after the boundary.
      now = T0 + 9_000;
      for (let i = 0; i < 3; i += 1) expect((await store.hit(subject, "general", rule)).allowed).toBe(true);
      now = T0 + 11_000;
      for (let i = 0; i < 3; i += 1) expect((await store.hit(subject, "general", rule)).allowed).toBe(false);
      now = T0 + 14_000; // half a window after filling
      expect((await store.hit(subject, "general", rule)).allowed).toBe(false);
    });

    it("keeps separate windows per subject and per category", async () => {
      for (let i = 0; i < 3; i += 1) await store.hit(subject, "general", rule);
      expect((await store.hit(subject, "general", rule)).allowed).toBe(false);
      expect((await store.hit(subject, "search", rule)).allowed).toBe(true);
      expect((await store.hit(`${subject}-other`, "general", rule)).allowed).toBe(true);
    });

    it("answers peek without counting", async () => {
      now = T0 + 500;
      await store.hit(subject, "general", rule);
      now = T0 + 700;
      await store.hit(subject, "general", rule);
      for (let i = 0; i < 5; i += 1) {
        expect(await store.peek(subject, "general", rule)).toEqual({
          limit: 3,
          used: 2,
          remaining: 1,
          resetAtMs: T0 + 10_500,
        });
      }
      now = T0 + 10_600;
      expect(await store.peek(subject, "general", rule)).toMatchObject({ used: 1, resetAtMs: T0 + 10_700 });
      expect(await store.peek(subject, "never-used", rule)).toEqual({
        limit: 3,
        used: 0,
        remaining: 3,
        resetAtMs: now,
      });
    });

    it("resets only the categories it is given", async () => {
      for (let i = 0; i < 3; i += 1) {
        await store.hit(subject, "general", rule);
        await store.hit(subject, "search", rule);
      }
      await store.reset(subject, ["general"]);
      expect((await store.hit(subject, "general", rule)).allowed).toBe(true);
      expect((await store.hit(subject, "search", rule)).allowed).toBe(false);
    });

    it("applies a lowered limit at once and waits for enough entries to leave", async () => {
      const big: Rule = { limit: 5, windowMs: 10_000 };
      for (let i = 0; i < 5; i += 1) {
        now = T0 + i * 1000;
        await store.hit(subject, "general", big);
      }
      now = T0 + 5_000;
      const denied = await store.hit(subject, "general", { limit: 2, windowMs: 10_000 });
      // 5 counted, limit 2: the 4th oldest (t = 3 s) must leave first.
      expect(denied).toMatchObject({ allowed: false, used: 5, remaining: 0, retryAfterMs: 8_000 });
    });

    it("admits exactly `limit` of many concurrent requests", async () => {
      const big: Rule = { limit: 100, windowMs: 60_000 };
      const results = await Promise.all(
        Array.from({ length: 300 }, () => store.hit(subject, "general", big)),
      );
      expect(results.filter((r) => r.allowed)).toHaveLength(100);
      expect(Math.max(...results.map((r) => r.used))).toBe(100);
    });
  });
}
