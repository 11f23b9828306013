// The gRPC listener's reading of grpc-timeout (PROTOCOL-HTTP2.md: 1 to 8 digits and a unit) and the
// heap of call deadlines that one timer serves (src/frontends/envoy-grpc/call-deadlines.ts).
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { createDeadlines, type Timed } from "../../src/frontends/envoy-grpc/call-deadlines.js";
import { grpcTimeoutMs } from "../../src/frontends/envoy-grpc/grpc-protocol.js";
import { sleep } from "../support/in-process.js";

describe("grpc-timeout", () => {
  it("reads every unit in milliseconds", () => {
    expect(grpcTimeoutMs("2H")).toBe(7_200_000);
    expect(grpcTimeoutMs("3M")).toBe(180_000);
    expect(grpcTimeoutMs("20S")).toBe(20_000);
    // What Envoy sends for its ext_authz (200 ms) and rate limit (20 ms) defaults.
    expect(grpcTimeoutMs("200m")).toBe(200);
    expect(grpcTimeoutMs("20m")).toBe(20);
    expect(grpcTimeoutMs("1500u")).toBeCloseTo(1.5);
    expect(grpcTimeoutMs("99999999n")).toBeCloseTo(99.999999);
    expect(grpcTimeoutMs("99999999H")).toBe(99_999_999 * 3_600_000);
  });

  it("takes 0 as a deadline already past, and leading zeros as digits", () => {
    expect(grpcTimeoutMs("0m")).toBe(0);
    expect(grpcTimeoutMs("00000100m")).toBe(100);
  });

  it("refuses what the grammar does not allow: no digits, more than 8, a sign, space, another unit", () => {
    for (const value of [
      "",
      "m",
      "100",
      "123456789m",
      "-1m",
      "+1m",
      " 1m",
      "1m ",
      "1 m",
      "1.5S",
      "1ms",
      "1s",
      "1h",
      "1X",
      "１m",
      "0x1m",
    ]) {
      expect(grpcTimeoutMs(value), value).toBeUndefined();
    }
  });

  it("reads any well-formed value as its digits times its unit", () => {
    const units = { H: 3_600_000, M: 60_000, S: 1_000, m: 1, u: 1e-3, n: 1e-6 };
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 99_999_999 }),
        fc.constantFrom(...(Object.keys(units) as (keyof typeof units)[])),
        (n, unit) => {
          expect(grpcTimeoutMs(`${n}${unit}`)).toBeCloseTo(n * units[unit], 6);
        },
      ),
    );
  });
});

describe("the call deadlines", () => {
  type Item = Timed & { name: string };
  const item = (name: string): Item => ({ name, deadline: 0, slot: -1 });

  it("expires calls in deadline order whatever order they came in, and never one removed", async () => {
    const expired: string[] = [];
    const deadlines = createDeadlines<Item>((i) => expired.push(i.name));
    const [slow, fast, middle, gone] = [item("slow"), item("fast"), item("middle"), item("gone")];
    deadlines.add(slow, "150m");
    deadlines.add(fast, "30m");
    deadlines.add(middle, "90m");
    deadlines.add(gone, "60m");
    deadlines.remove(gone);
    expect(gone.slot).toBe(-1);
    await sleep(400);
    expect(expired).toEqual(["fast", "middle", "slow"]);
    expect([slow, fast, middle].map((i) => i.slot)).toEqual([-1, -1, -1]);
  });

  it("leaves a call without grpc-timeout, or with a malformed one, out of the heap", async () => {
    const expired: string[] = [];
    const deadlines = createDeadlines<Item>((i) => expired.push(i.name));
    const [none, bad] = [item("none"), item("bad")];
    deadlines.add(none, undefined);
    deadlines.add(bad, "1 m");
    expect([none.slot, bad.slot]).toEqual([-1, -1]);
    await sleep(50);
    expect(expired).toEqual([]);
  });

  it("keeps a heap's order through any adds and removes", () => {
    fc.assert(
      fc.property(
        fc.array(fc.tuple(fc.boolean(), fc.integer({ min: 1, max: 99_999 })), { maxLength: 300 }),
        (ops) => {
          const deadlines = createDeadlines<Item>(() => undefined);
          const live: Item[] = [];
          for (const [add, n] of ops) {
            if (add || live.length === 0) {
              const i = item(String(n));
              // Seconds far enough away that no timer fires during the property.
              deadlines.add(i, `${n}S`);
              live.push(i);
            } else {
              const i = live.splice(n % live.length, 1)[0] as Item;
              deadlines.remove(i);
              expect(i.slot).toBe(-1);
            }
            // Every live item sits at its own slot, at or after its parent's deadline.
            const bySlot = [...live].sort((a, b) => a.slot - b.slot);
            expect(bySlot.map((i) => i.slot)).toEqual(live.map((_, k) => k));
            for (const i of live) {
              if (i.slot === 0) continue;
              const parent = bySlot[(i.slot - 1) >> 1] as Item;
              expect(parent.deadline).toBeLessThanOrEqual(i.deadline);
            }
          }
          for (const i of live) deadlines.remove(i);
        },
      ),
    );
  });
});
