// The rate limit service's hit counts by domain, key path and result (src/metrics/rpc-observer.ts):
// each label set resolved once, and past MAX_RLS_SERIES label sets the new key paths counted
// under `_other`, so that a stream of distinct values cannot grow the metrics without bound.
import { describe, expect, it } from "vitest";
import type { Metrics } from "../../src/metrics/metrics.js";
import { createRlsObserver } from "../../src/metrics/rpc-observer.js";

function recorder() {
  const counts = new Map<string, number>();
  let made = 0;
  const metrics = {
    rlsHits: {
      labels(labels: { domain: string; key: string; result: string }) {
        made += 1;
        const id = `${labels.domain}|${labels.key}|${labels.result}`;
        return { inc: (value = 1) => counts.set(id, (counts.get(id) ?? 0) + value) };
      },
    },
  } as unknown as Pick<Metrics, "rlsHits">;
  return { metrics, counts, made: () => made };
}

describe("createRlsObserver", () => {
  it("counts hits per domain, key path and result, each label set made once", () => {
    const { metrics, counts, made } = recorder();
    const observe = createRlsObserver(metrics);
    observe("d", "d.k_v", "within", 1);
    observe("d", "d.k_v", "within", 2);
    observe("d", "d.k_v", "over", 1);
    observe("e", "d.k_v", "within", 5);
    expect(Object.fromEntries(counts)).toEqual({
      "d|d.k_v|within": 3,
      "d|d.k_v|over": 1,
      "e|d.k_v|within": 5,
    });
    expect(made()).toBe(3);
  });

  it("counts new key paths under _other once 10,000 label sets exist, and the known ones as before", () => {
    const { metrics, counts, made } = recorder();
    const observe = createRlsObserver(metrics);
    for (let i = 0; i < 10_000; i += 1) observe("d", `d.user_${i}`, "within", 1);
    observe("d", "d.user_new", "within", 1);
    observe("d", "d.user_other", "within", 2);
    observe("d", "d.user_7", "within", 1);
    observe("d", "d.user_new", "over", 1);
    expect(counts.get("d|_other|within")).toBe(3);
    expect(counts.get("d|_other|over")).toBe(1);
    expect(counts.get("d|d.user_7|within")).toBe(2);
    expect(counts.has("d|d.user_new|within")).toBe(false);
    expect(made()).toBe(10_002);
  });
});
