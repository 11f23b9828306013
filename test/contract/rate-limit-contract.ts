// The contract every rate-limit store honours; run unchanged against the memory store, one Redis, a
// Redis Cluster and Sentinel: each algorithm, windows in lists, layers counted in all or none.
import { afterAll, beforeEach, describe, expect, it } from "vitest";
import type { Limiter } from "../../src/ratelimit/limiter.js";
import { ALGORITHMS, type Algorithm, type Layer, type Rule } from "../../src/ratelimit/types.js";

export type ContractHarness = {
  /** A store whose clock is `now()` in ms. */
  create(now: () => number): Promise<{ store: Limiter; close(): Promise<void> }>;
};

const T0 = 1_700_000_000_000;

const rule = (algorithm: Algorithm, ...windows: [number, number][]): Rule => ({
  algorithm,
  windows: windows.map(([limit, windowMs]) => ({ limit, windowMs })),
});
const layer = (category: string, r: Rule): Layer[] => [{ category, rule: r }];

export function describeRateLimitContract(name: string, harness: ContractHarness): void {
  describe(`rate-limit store contract: ${name}`, () => {
    let now = T0;
    let store: Limiter;
    const closers: (() => Promise<void>)[] = [];
    let subjectCounter = 0;
    let subject = "";

    beforeEach(async () => {
      now = T0;
      subjectCounter += 1;
      subject = `ip:contract-${subjectCounter}-${Math.random().toString(36).slice(2, 8)}`;
      const created = await harness.create(() => now);
      store = created.store;
      closers.push(created.close);
    });
    afterAll(async () => {
      for (const close of closers) await close();
    });

    const log = rule("sliding-log", [3, 10_000]);
    const general = layer("general", log);

    describe("sliding-log", () => {
      it("allows exactly `limit` requests, then denies with the window's state", async () => {
        const results = [];
        for (let i = 0; i < 5; i += 1) {
          now = T0 + i * 100;
          results.push(await store.hit(subject, general));
        }
        expect(results.map((r) => r.allowed)).toEqual([true, true, true, false, false]);
        expect(results.map((r) => r.used)).toEqual([1, 2, 3, 3, 3]);
        expect(results.map((r) => r.remaining)).toEqual([2, 1, 0, 0, 0]);
        expect(results[0]).toMatchObject({
          limit: 3,
          windowMs: 10_000,
          resetAtMs: T0 + 10_000,
          retryAfterMs: 0,
        });
        expect(results[3]).toMatchObject({ resetAtMs: T0 + 10_000, retryAfterMs: 10_000 - 300 });
        expect(results[4]?.retryAfterMs).toBe(10_000 - 400);
      });

      it("lets one more request in when the oldest entry leaves, and only one", async () => {
        for (let i = 0; i < 3; i += 1) {
          now = T0 + i * 1000;
          await store.hit(subject, general);
        }
        now = T0 + 9_999;
        expect((await store.hit(subject, general)).allowed).toBe(false);
        now = T0 + 10_000;
        const freed = await store.hit(subject, general);
        expect(freed).toMatchObject({ allowed: true, used: 3, remaining: 0, resetAtMs: T0 + 11_000 });
        const next = await store.hit(subject, general);
        expect(next).toMatchObject({ allowed: false, retryAfterMs: 1_000 });
      });

      it("refuses the double-window burst that a fixed window would let through", async () => {
        now = T0 + 9_000;
        for (let i = 0; i < 3; i += 1) expect((await store.hit(subject, general)).allowed).toBe(true);
        now = T0 + 11_000;
        for (let i = 0; i < 3; i += 1) expect((await store.hit(subject, general)).allowed).toBe(false);
        now = T0 + 14_000;
        expect((await store.hit(subject, general)).allowed).toBe(false);
        now = T0 + 19_000;
        expect((await store.hit(subject, general)).allowed).toBe(true);
      });

      it("forgets a window that went idle for longer than its length", async () => {
        for (let i = 0; i < 3; i += 1) await store.hit(subject, general);
        now = T0 + 60_000;
        const results = await Promise.all([1, 2, 3, 4].map(() => store.hit(subject, general)));
        expect(results.filter((r) => r.allowed)).toHaveLength(3);
      });

      it("applies a lowered limit at once and waits for enough entries to leave", async () => {
        const big = layer("general", rule("sliding-log", [5, 10_000]));
        for (let i = 0; i < 5; i += 1) {
          now = T0 + i * 1000;
          await store.hit(subject, big);
        }
        now = T0 + 5_000;
        const denied = await store.hit(subject, layer("general", rule("sliding-log", [2, 10_000])));
        // 5 counted, limit 2: the 4th oldest (t = 3 s) must leave first.
        expect(denied).toMatchObject({ allowed: false, used: 5, remaining: 0, retryAfterMs: 8_000 });
      });
      it("starts a new window from the entries inside its span", async () => {
        const before = layer("search", rule("sliding-log", [10, 1_000], [20, 3_600_000]));
        for (let i = 0; i < 8; i += 1) {
          now = T0 + i * 300;
          await store.hit(subject, before);
        }
        // All eight fall inside the last minute: a new 5-per-minute window is full already.
        now = T0 + 2_200;
        const after = layer("search", rule("sliding-log", [5, 60_000], [20, 3_600_000]));
        expect(await store.hit(subject, after)).toMatchObject({ allowed: false, window: 0, used: 8 });
        now = T0 + 60_000 + 3 * 300 + 1;
        expect(await store.hit(subject, after)).toMatchObject({ allowed: true, window: 0, used: 5 });
      });
    });

    describe("sliding-counter", () => {
      const counter = layer("general", rule("sliding-counter", [4, 10_000]));

      it("admits `limit` in an empty window, then weighs the previous window by its overlap", async () => {
        // Aligned to a fixed window's start so the weights are easy to follow.
        now = Math.ceil(T0 / 10_000) * 10_000;
        const start = now;
        for (let i = 0; i < 4; i += 1) expect((await store.hit(subject, counter)).allowed).toBe(true);
        expect(await store.hit(subject, counter)).toMatchObject({ allowed: false, remaining: 0, used: 4 });
        // Half-way into the next fixed window the previous 4 weigh 2: two more fit.
        now = start + 15_000;
        const a = await store.hit(subject, counter);
        const b = await store.hit(subject, counter);
        const c = await store.hit(subject, counter);
        expect([a.allowed, b.allowed, c.allowed]).toEqual([true, true, false]);
        expect(a).toMatchObject({ used: 3, remaining: 1 });
        // Denied at 2 + 2 = 4: it fits once the previous window's weight falls to 1, at 3/4.
        expect(c.retryAfterMs).toBe(2_500);
        now = start + 17_499;
        expect((await store.hit(subject, counter)).allowed).toBe(false);
        now = start + 17_500;
        expect((await store.hit(subject, counter)).allowed).toBe(true);
      });
    });

    describe("gcra", () => {
      const gcra = layer("general", rule("gcra", [5, 1_000]));

      it("lets a burst of `limit` through, then one request per emission interval", async () => {
        const burst = [];
        for (let i = 0; i < 6; i += 1) burst.push(await store.hit(subject, gcra));
        expect(burst.map((r) => r.allowed)).toEqual([true, true, true, true, true, false]);
        expect(burst.map((r) => r.remaining)).toEqual([4, 3, 2, 1, 0, 0]);
        expect(burst[0]).toMatchObject({ resetAtMs: T0 + 200 });
        expect(burst[5]).toMatchObject({ retryAfterMs: 200, resetAtMs: T0 + 200 });
        now = T0 + 199;
        expect((await store.hit(subject, gcra)).allowed).toBe(false);
        now = T0 + 200;
        expect(await store.hit(subject, gcra)).toMatchObject({ allowed: true, remaining: 0 });
        expect((await store.hit(subject, gcra)).allowed).toBe(false);
        // A full window later the bucket is full again.
        now = T0 + 1_200;
        expect(await store.hit(subject, gcra)).toMatchObject({ allowed: true, remaining: 4 });
      });
    });

    describe.each(
      ALGORITHMS.flatMap((from) => ALGORITHMS.filter((to) => to !== from).map((to) => [from, to] as const)),
    )("a change of algorithm: %s to %s", (from, to) => {
      it("keeps what was counted: the new algorithm starts as full as the old one was", async () => {
        for (let i = 0; i < 10; i += 1) {
          now = T0 + i * 10;
          expect((await store.hit(subject, layer("search", rule(from, [10, 3_600_000])))).allowed).toBe(true);
        }
        now += 1_000;
        expect((await store.hit(subject, layer("search", rule(to, [10, 3_600_000])))).allowed).toBe(false);
        expect((await store.hit(subject, layer("search", rule(to, [10, 7_200_000])))).allowed).toBe(false);
      });

      it("keeps the count through a change and back", async () => {
        const hourly = (algorithm: Algorithm) => layer("search", rule(algorithm, [10, 3_600_000]));
        const admitted = async (algorithm: Algorithm, tries: number) => {
          let n = 0;
          for (let i = 0; i < tries; i += 1) {
            now += 10;
            if ((await store.hit(subject, hourly(algorithm))).allowed) n += 1;
          }
          return n;
        };
        expect(await admitted(from, 5)).toBe(5);
        expect(await admitted(to, 10)).toBe(5);
        expect(await admitted(from, 10)).toBe(0);
        expect(await admitted(to, 10)).toBe(0);
      });

      it("starts from nothing when nothing was counted", async () => {
        expect(await store.hit(subject, layer("search", rule(to, [10, 3_600_000])))).toMatchObject({
          allowed: true,
          remaining: 9,
        });
      });
    });

    describe.each(ALGORITHMS)("every algorithm: %s", (algorithm) => {
      const one = layer("general", rule(algorithm, [3, 10_000]));

      it("denies with a Retry-After at which the same request is allowed, and not a millisecond before", async () => {
        for (let i = 0; i < 3; i += 1) {
          now = T0 + i * 700;
          expect((await store.hit(subject, one)).allowed).toBe(true);
        }
        now = T0 + 2_500;
        const denied = await store.hit(subject, one);
        expect(denied.allowed).toBe(false);
        expect(denied.retryAfterMs).toBeGreaterThan(0);
        const at = now + denied.retryAfterMs;
        now = at - 1;
        expect((await store.hit(subject, one)).allowed).toBe(false);
        now = at;
        expect((await store.hit(subject, one)).allowed).toBe(true);
      });

      it("does not record denied requests", async () => {
        for (let i = 0; i < 3; i += 1) await store.hit(subject, one);
        for (let i = 0; i < 50; i += 1) {
          now = T0 + 1 + i * 10;
          expect((await store.hit(subject, one)).allowed).toBe(false);
        }
        now = T0 + 30_000;
        const after = await Promise.all([1, 2, 3, 4].map(() => store.hit(subject, one)));
        expect(after.filter((r) => r.allowed)).toHaveLength(3);
      });

      it("keeps separate windows per subject and per category", async () => {
        for (let i = 0; i < 3; i += 1) await store.hit(subject, one);
        expect((await store.hit(subject, one)).allowed).toBe(false);
        expect((await store.hit(subject, layer("search", one[0]?.rule as Rule))).allowed).toBe(true);
        expect((await store.hit(`${subject}-other`, one)).allowed).toBe(true);
      });

      it("decides without counting on a dry run, and peeks every window without counting", async () => {
        const two = layer("general", rule(algorithm, [2, 1_000], [5, 10_000]));
        await store.hit(subject, two);
        for (let i = 0; i < 5; i += 1) {
          expect(await store.hit(subject, two, { dryRun: true })).toMatchObject({ allowed: true });
        }
        const windows = await store.peek(subject, two[0] as Layer);
        expect(windows.map((w) => [w.limit, w.windowMs, w.used, w.remaining])).toEqual([
          [2, 1_000, 1, 1],
          [5, 10_000, 1, 4],
        ]);
        expect((await store.hit(subject, two)).allowed).toBe(true);
        expect((await store.hit(subject, two)).allowed).toBe(false);
        expect(await store.peek(`${subject}-never`, two[0] as Layer)).toEqual([
          { limit: 2, windowMs: 1_000, used: 0, remaining: 2, resetAtMs: now },
          { limit: 5, windowMs: 10_000, used: 0, remaining: 5, resetAtMs: now },
        ]);
      });

      it("resets only the categories it is given", async () => {
        const search = layer("search", one[0]?.rule as Rule);
        for (let i = 0; i < 3; i += 1) {
          await store.hit(subject, one);
          await store.hit(subject, search);
        }
        await store.reset(subject, ["general"]);
        expect((await store.hit(subject, one)).allowed).toBe(true);
        expect((await store.hit(subject, search)).allowed).toBe(false);
      });

      it("counts a request in every window of a list or in none", async () => {
        const two = layer("general", rule(algorithm, [2, 1_000], [3, 60_000]));
        // The short window refuses the third request of the second: the long one must not count it.
        const first = [
          await store.hit(subject, two),
          await store.hit(subject, two),
          await store.hit(subject, two),
        ];
        expect(first.map((r) => r.allowed)).toEqual([true, true, false]);
        expect(first[2]).toMatchObject({ window: 0, limit: 2 });
        now = T0 + 2_000;
        expect(await store.hit(subject, two)).toMatchObject({ allowed: true, window: 1, remaining: 0 });
        expect(await store.hit(subject, two)).toMatchObject({ allowed: false, window: 1, limit: 3 });
      });

      it("describes the window with least room left, and on a denial the one that frees last", async () => {
        const two = layer("general", rule(algorithm, [5, 1_000], [6, 60_000]));
        expect(await store.hit(subject, two)).toMatchObject({ window: 0, remaining: 4, limit: 5 });
        for (let i = 0; i < 4; i += 1) await store.hit(subject, two);
        // The short window is free again; the long one has room for one.
        now = T0 + 2_000;
        expect(await store.hit(subject, two)).toMatchObject({ allowed: true, window: 1, remaining: 0 });
        const denied = await store.hit(subject, two);
        expect(denied).toMatchObject({ allowed: false, window: 1, limit: 6 });
        expect(denied.retryAfterMs).toBeGreaterThan(1_000);
      });

      it("counts layers of one subject in all of them or in none", async () => {
        const ip: Layer = { category: "ip", rule: rule(algorithm, [4, 60_000]) };
        const general: Layer = { category: "general", rule: rule(algorithm, [2, 1_000]) };
        const results = [];
        for (let i = 0; i < 4; i += 1) results.push(await store.hit(subject, [ip, general]));
        expect(results.map((r) => [r.allowed, r.layer])).toEqual([
          [true, 1],
          [true, 1],
          [false, 1],
          [false, 1],
        ]);
        // The refused requests left no trace in the first layer: two more fit there alone.
        expect((await store.hit(subject, [ip])).allowed).toBe(true);
        expect((await store.hit(subject, [ip])).allowed).toBe(true);
        expect(await store.hit(subject, [ip])).toMatchObject({ allowed: false, layer: 0 });
        // Now the first layer refuses, and the second does not count it either.
        now = T0 + 2_000;
        expect(await store.hit(subject, [ip, general])).toMatchObject({ allowed: false, layer: 0 });
        expect((await store.hit(subject, [general])).allowed).toBe(true);
        expect((await store.hit(subject, [general])).allowed).toBe(true);
        expect((await store.hit(subject, [general])).allowed).toBe(false);
      });

      it("lets a full shadow layer refuse nothing: the enforced layers decide and count the request", async () => {
        const ip: Layer = { category: "ip", rule: rule(algorithm, [2, 60_000]), shadow: true };
        const general: Layer = { category: "general", rule: rule(algorithm, [4, 60_000]) };
        const results = [];
        for (let i = 0; i < 5; i += 1) results.push(await store.hit(subject, [ip, general]));
        // Over the shadow layer: not allowed, described by it, yet counted in the enforced layer;
        // once that is full too, its refusal is the one described.
        expect(results.map((r) => [r.allowed, r.layer])).toEqual([
          [true, 0],
          [true, 0],
          [false, 0],
          [false, 0],
          [false, 1],
        ]);
        expect(results[4]).toMatchObject({ limit: 4, used: 4, remaining: 0 });
        // The shadow layer kept only what it had room for; the enforced one all four.
        expect(await store.peek(subject, ip)).toMatchObject([{ used: 2 }]);
        expect(await store.peek(subject, general)).toMatchObject([{ used: 4 }]);
        // A full enforced layer still refuses for both: nothing counts in the shadow one.
        const roomy: Layer = { category: "search", rule: rule(algorithm, [9, 60_000]), shadow: true };
        expect(await store.hit(subject, [roomy, general])).toMatchObject({ allowed: false, layer: 1 });
        expect(await store.peek(subject, roomy)).toMatchObject([{ used: 0 }]);
      });

      describe("when the rule's windows change (a reload, an override, another order)", () => {
        const hour = 3_600_000;
        const spend = async (layers: Layer[], n: number) => {
          for (let i = 0; i < n; i += 1) {
            now += 10;
            expect((await store.hit(subject, layers)).allowed).toBe(true);
          }
        };
        const admitted = async (layers: Layer[], tries: number) => {
          let n = 0;
          for (let i = 0; i < tries; i += 1) {
            now += 10;
            if ((await store.hit(subject, layers)).allowed) n += 1;
          }
          return n;
        };

        it("keeps a window's count when a shorter window is added beside it", async () => {
          await spend(layer("search", rule(algorithm, [20, hour])), 20);
          now += 5_000;
          const both = layer("search", rule(algorithm, [10, 1_000], [20, hour]));
          expect(await admitted(both, 25)).toBe(0);
          const [, hourly] = await store.peek(subject, both[0] as Layer);
          expect(hourly).toMatchObject({ limit: 20, used: 20, remaining: 0 });
        });

        it("keeps a window's count when the windows beside it are removed", async () => {
          const both = layer("search", rule(algorithm, [10, 1_000], [20, hour]));
          for (let i = 0; i < 4; i += 1) {
            await spend(both, 5);
            now += 2_000;
          }
          expect(await admitted(layer("search", rule(algorithm, [15, hour])), 20)).toBe(0);
          expect(await admitted(layer("search", rule(algorithm, [25, hour])), 20)).toBe(5);
        });

        it("keeps every count whatever order the windows come in", async () => {
          const forward = layer("search", rule(algorithm, [3, 1_000], [5, hour]));
          const backward = layer("search", rule(algorithm, [5, hour], [3, 1_000]));
          await spend(forward, 3);
          expect(await admitted(backward, 3)).toBe(0);
          now += 2_000;
          expect(await admitted(backward, 5)).toBe(2);
          now += 2_000;
          expect(await admitted(forward, 5)).toBe(0);
        });

        it("stops counting a removed window, and counts a window that comes back", async () => {
          const both = layer("search", rule(algorithm, [2, 1_000], [20, hour]));
          await spend(both, 2);
          expect(await admitted(both, 1)).toBe(0);
          // Without the per-second window the hour has room for the rest of its 20.
          expect(await admitted(layer("search", rule(algorithm, [20, hour])), 30)).toBe(18);
          now += 2_000;
          expect(await admitted(both, 1)).toBe(0);
        });

        it("keeps the address's layer's count when its windows change beside a user's", async () => {
          const general: Layer = { category: "general", rule: rule(algorithm, [100, hour]) };
          const ip = (r: Rule): Layer[] => [{ category: "ip", rule: r }, general];
          await spend(ip(rule(algorithm, [6, hour])), 6);
          now += 2_000;
          expect(await admitted(ip(rule(algorithm, [4, 1_000], [6, hour])), 5)).toBe(0);
          now += 2_000;
          expect(await admitted(ip(rule(algorithm, [6, hour], [4, 1_000])), 5)).toBe(0);
          expect(await admitted([general], 5)).toBe(5);
        });
      });

      it("keeps a window's count when its limit is lowered or raised", async () => {
        const hourly = (limit: number) => layer("general", rule(algorithm, [limit, 3_600_000]));
        for (let i = 0; i < 10; i += 1) {
          now = T0 + i * 10;
          expect((await store.hit(subject, hourly(100))).allowed).toBe(true);
        }
        let admitted = 0;
        for (let i = 0; i < 20; i += 1) if ((await store.hit(subject, hourly(10))).allowed) admitted += 1;
        expect(admitted).toBe(0);
        for (let i = 0; i < 20; i += 1) if ((await store.hit(subject, hourly(15))).allowed) admitted += 1;
        expect(admitted).toBe(5);
      });

      it("keeps a window's count when its length changes, longer or shorter", async () => {
        const hour = 3_600_000;
        for (let i = 0; i < 10; i += 1) {
          now = T0 + i * 10;
          expect((await store.hit(subject, layer("general", rule(algorithm, [10, hour])))).allowed).toBe(
            true,
          );
        }
        for (const windowMs of [2 * hour, hour / 2, 60_000]) {
          now += 1_000;
          const changed = layer("general", rule(algorithm, [10, windowMs]));
          expect((await store.hit(subject, changed)).allowed, `10/${windowMs} ms`).toBe(false);
        }
      });

      it("admits exactly `limit` of many concurrent requests", async () => {
        const big = layer("general", rule(algorithm, [100, 60_000]));
        const results = await Promise.all(Array.from({ length: 300 }, () => store.hit(subject, big)));
        expect(results.filter((r) => r.allowed)).toHaveLength(100);
        expect(Math.min(...results.map((r) => r.remaining))).toBe(0);
      });
    });

    describe.each(ALGORITHMS)("the port's addend and modes: %s", (algorithm) => {
      const five = rule(algorithm, [5, 10_000]);
      const one = rule(algorithm, [1, 10_000]);
      const at = (category: string, r: Rule) => ({ subject, category, rule: r });
      const windowOf = async (request: Parameters<Limiter["limit"]>[0]) => {
        const result = await store.limit(request);
        if (result.kind !== "limited") throw new Error(`unexpected ${result.kind}`);
        return result;
      };

      it("counts an addend at once, and refuses one that does not fit without counting any of it", async () => {
        const three = { layers: [at("general", five)], addend: 3 };
        expect((await windowOf(three)).layers[0]).toMatchObject({
          room: true,
          counted: true,
          windows: [{ used: 3, remaining: 2, retryAfterMs: 0 }],
        });
        const refused = await windowOf(three);
        expect(refused.allowed).toBe(false);
        expect(refused.layers[0]).toMatchObject({ room: false, counted: false, windows: [{ remaining: 2 }] });
        expect(refused.layers[0]?.windows[0]?.retryAfterMs).toBeGreaterThan(0);
        expect((await windowOf({ layers: [at("general", five)], addend: 2 })).layers[0]).toMatchObject({
          counted: true,
          windows: [{ used: 5, remaining: 0 }],
        });
        // An addend of 0 only looks.
        expect((await windowOf({ layers: [at("general", five)], addend: 0 })).layers[0]).toMatchObject({
          counted: false,
          windows: [{ used: 5, remaining: 0 }],
        });
      });

      it("counts each layer with room on its own in mode each, and in all or none otherwise", async () => {
        const both = [at("search", one), at("general", five)];
        expect((await windowOf({ layers: both, mode: "each" })).layers.map((l) => l.counted)).toEqual([
          true,
          true,
        ]);
        // The one-request layer is full: each counts the other anyway (and a fixed window counts
        // its refused hit too, as envoyproxy/ratelimit does); all-or-none counts neither.
        const each = await windowOf({ layers: both, mode: "each" });
        expect(each.allowed).toBe(false);
        expect(each.layers.map((l) => [l.room, l.counted])).toEqual([
          [false, algorithm === "fixed-window"],
          [true, true],
        ]);
        expect(each.layers[1]?.windows[0]).toMatchObject({ used: 2, remaining: 3 });
        // All-or-none on categories of its own (a fixed window counts apart in mode each, below).
        const aon = [at("search-aon", one), at("general-aon", five)];
        expect((await windowOf({ layers: aon })).layers.map((l) => l.counted)).toEqual([true, true]);
        const all = await windowOf({ layers: aon });
        expect(all.layers.map((l) => l.counted)).toEqual([false, false]);
        expect((await store.peek(subject, { category: "general-aon", rule: five }))[0]).toMatchObject({
          used: 1,
        });
        // Mode each with nothing to count only looks: the counts above stand.
        const looked = await windowOf({ layers: both, mode: "each", addend: 0 });
        expect(looked.layers.map((l) => [l.counted, l.windows[0]?.used])).toEqual([
          [false, 1],
          [false, 2],
        ]);
      });

      it("in mode each, decides every layer as a call of that layer alone would, whatever its windows or state", async () => {
        // Layers of one window, of two windows (two of them: a fixed window of one window is counted
        // apart, see the next describe), and one whose state another algorithm left: the same
        // requests sent together in mode each (subject A) and one layer per call (subject B).
        const other: Algorithm = algorithm === "sliding-log" ? "sliding-counter" : "sliding-log";
        const layers = (s: string) => [
          { subject: s, category: "plain", rule: rule(algorithm, [3, 10_000]) },
          { subject: s, category: "two", rule: rule(algorithm, [2, 1_000], [4, 10_000]) },
          { subject: s, category: "wide", rule: rule(algorithm, [3, 2_000], [5, 10_000]) },
          { subject: s, category: "switched", rule: rule(algorithm, [4, 10_000]) },
        ];
        const a = subject;
        const b = `${subject}-alone`;
        for (const s of [a, b]) {
          await store.limit({
            layers: [{ subject: s, category: "switched", rule: rule(other, [4, 10_000]) }],
            addend: 2,
          });
        }
        const together = [];
        const alone = [];
        for (const [step, addend] of [1, 2, 0, 1, 1, 2, 1, 0, 1, 1].entries()) {
          now = T0 + step * 400;
          together.push((await windowOf({ layers: layers(a), addend, mode: "each" })).layers);
          const one = [];
          for (const l of layers(b))
            one.push(...(await windowOf({ layers: [l], addend, mode: "each" })).layers);
          alone.push(one);
        }
        expect(together).toEqual(alone);
        // Every layer was refused at some step, and counted at another: the comparison saw both.
        for (let i = 0; i < 4; i += 1) {
          expect(together.some((step) => step[i]?.room === false)).toBe(true);
          expect(together.some((step) => step[i]?.counted === true)).toBe(true);
        }
      });

      it("in mode each, counts a fixed window's refused hits as envoyproxy/ratelimit does; never another algorithm's", async () => {
        const three = rule(algorithm, [3, 10_000]);
        const two = { layers: [at("rls", three)], addend: 2, mode: "each" as const };
        expect((await windowOf(two)).layers[0]).toMatchObject({ room: true, counted: true });
        // Two more do not fit in the one left: refused, with its wait.
        const refused = await windowOf(two);
        expect(refused.layers[0]?.room).toBe(false);
        expect(refused.layers[0]?.windows[0]?.retryAfterMs).toBeGreaterThan(0);
        const fixed = algorithm === "fixed-window";
        // Counted, the fixed window is over its limit; not counted, the one left still shows.
        expect(refused.layers[0]?.windows[0]?.remaining).toBe(fixed ? 0 : 1);
        expect(refused.layers[0]?.counted).toBe(fixed);
        // The reference's counter went past the limit: a single hit is refused there, allowed elsewhere.
        const single = await windowOf({ layers: [at("rls", three)], mode: "each" });
        expect(single.layers[0]?.room).toBe(!fixed);
        // All-or-none never counts a refusal, fixed window or not.
        const four = rule(algorithm, [3, 10_000]);
        await windowOf({ layers: [at("aon", four)], addend: 2 });
        expect((await windowOf({ layers: [at("aon", four)], addend: 2 })).layers[0]?.counted).toBe(false);
        expect((await windowOf({ layers: [at("aon", four)] })).layers[0]?.room).toBe(true);
      });
    });

    describe("the reference's fixed window (mode each)", () => {
      const three = rule("fixed-window", [3, 10_000]);
      const at = (category: string, r: Rule) => ({ subject, category, rule: r });
      const each = async (category: string, addend: number) => {
        const result = await store.limit({ layers: [at(category, three)], addend, mode: "each" });
        if (result.kind !== "limited") throw new Error(`unexpected ${result.kind}`);
        return result.layers[0];
      };

      it("counts per window aligned to the epoch, refused hits too, and frees at the window's end", async () => {
        // T0 is a multiple of 10 s: the window [T0, T0 + 10 s).
        now = T0 + 100;
        expect(await each("ref", 2)).toEqual({
          room: true,
          counted: true,
          windows: [
            { limit: 3, windowMs: 10_000, used: 2, remaining: 1, resetAtMs: T0 + 10_000, retryAfterMs: 0 },
          ],
        });
        now = T0 + 9_998;
        expect(await each("ref", 2)).toEqual({
          room: false,
          counted: true,
          windows: [
            { limit: 3, windowMs: 10_000, used: 3, remaining: 0, resetAtMs: T0 + 10_000, retryAfterMs: 2 },
          ],
        });
        // Counted past the limit (4 + 1 = 5 > 3): one more hit is refused too, until the window ends.
        expect((await each("ref", 1))?.room).toBe(false);
        // An addend of 0 only looks.
        expect((await each("ref", 0))?.windows[0]).toMatchObject({ used: 3, remaining: 0 });
        now = T0 + 10_000;
        expect(await each("ref", 1)).toMatchObject({
          room: true,
          windows: [{ used: 1, remaining: 2, resetAtMs: T0 + 20_000 }],
        });
        // More hits than the limit at once never pass: the answer names the next window's end.
        now = T0 + 12_500;
        expect(await each("ref", 4)).toMatchObject({
          room: false,
          counted: true,
          windows: [{ used: 3, remaining: 0, retryAfterMs: 30_000 - 12_500 }],
        });
      });

      it("looks at an empty window without counting: nothing used, reset now", async () => {
        now = T0 + 4_000;
        expect(await each("empty", 0)).toEqual({
          room: true,
          counted: false,
          windows: [
            { limit: 3, windowMs: 10_000, used: 0, remaining: 3, resetAtMs: T0 + 4_000, retryAfterMs: 0 },
          ],
        });
        expect((await each("empty", 1))?.windows[0]).toMatchObject({ used: 1 });
      });

      it("is counted apart from the category's all-or-none state", async () => {
        now = T0 + 1_000;
        await each("apart", 3);
        const aon = await store.limit({ layers: [at("apart", three)], addend: 3 });
        expect(aon.kind === "limited" && aon.layers[0]?.counted).toBe(true);
        expect((await each("apart", 0))?.windows[0]?.used).toBe(3);
      });

      it("admits exactly `limit` of many concurrent hits, beside another algorithm's layer", async () => {
        now = T0 + 2_000;
        const big = rule("fixed-window", [100, 60_000]);
        const log = rule("sliding-log", [1_000, 60_000]);
        const results = await Promise.all(
          Array.from({ length: 300 }, () =>
            store.limit({ layers: [at("crowd", big), at("crowd-log", log)], mode: "each" }),
          ),
        );
        const rooms = results.map((r) => (r.kind === "limited" ? r.layers.map((l) => l.room) : []));
        expect(rooms.filter((r) => r[0] === true)).toHaveLength(100);
        expect(rooms.every((r) => r[1] === true)).toBe(true);
      });
    });
  });
}
