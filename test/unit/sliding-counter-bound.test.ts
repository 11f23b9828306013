// How far the sliding counter over-admits against the exact log: measured on adversarial and random
// traces, with the bound docs/check.md states (at most 2 × limit − 1 in any window; about limit on
// traffic that is not aimed at the boundary).
import { describe, expect, it } from "vitest";
import type { Algorithm } from "../../src/ratelimit/types.js";
import { memoryLimiter } from "../support/limiters.js";

const LIMIT = 100;
const WINDOW_MS = 60_000;

/** The most requests admitted in any window of WINDOW_MS (each window (t − w, t]). */
function busiestWindow(admitted: number[]): number {
  let most = 0;
  let start = 0;
  for (let end = 0; end < admitted.length; end += 1) {
    while ((admitted[start] as number) <= (admitted[end] as number) - WINDOW_MS) start += 1;
    most = Math.max(most, end - start + 1);
  }
  return most;
}

/** Replays request times (ms, ascending) through one algorithm; returns the admitted times. */
async function admittedTimes(algorithm: Algorithm, times: number[]): Promise<number[]> {
  let now = 0;
  const store = memoryLimiter({ clock: () => now, sweepIntervalMs: 3_600_000 });
  const layers = [
    { category: "general", rule: { algorithm, windows: [{ limit: LIMIT, windowMs: WINDOW_MS }] } },
  ];
  const admitted: number[] = [];
  for (const t of times) {
    now = t;
    if ((await store.hit("ip:trace", layers)).allowed) admitted.push(t);
  }
  store.close();
  return admitted;
}

/** A fixed window's worth at its very end, then a steady stream: the counter's worst case. */
function boundaryAttack(): number[] {
  const times: number[] = [];
  const start = 10 * WINDOW_MS;
  for (let i = 0; i < LIMIT; i += 1) times.push(start - 1);
  for (let t = start; t < start + 2 * WINDOW_MS; t += 50) times.push(t);
  return times;
}

describe("the sliding counter against the exact log", () => {
  it("stays within 2 × limit − 1 in any window on the boundary attack, where the log admits exactly limit", async () => {
    const trace = boundaryAttack();
    const log = busiestWindow(await admittedTimes("sliding-log", trace));
    const counter = busiestWindow(await admittedTimes("sliding-counter", trace));
    console.log(
      `boundary attack, ${LIMIT}/${WINDOW_MS / 1000}s: log ${log}, sliding-counter ${counter} in the busiest window`,
    );
    expect(log).toBe(LIMIT);
    expect(counter).toBeGreaterThan(LIMIT);
    expect(counter).toBeLessThanOrEqual(2 * LIMIT - 1);
  });

  it("over-admits little on random traffic at 1.2 to 4 times the limit", async () => {
    // Uniform random arrivals (a seeded generator: the same traces every run) over 20 windows.
    const random = (seed: number) => () => {
      seed = (seed + 0x6d2b79f5) | 0;
      let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
      t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
      return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
    };
    const figures: string[] = [];
    let worst = 0;
    for (const rate of [1.2, 2, 4]) {
      for (const seed of [1, 2, 3]) {
        const next = random(seed);
        const times = Array.from({ length: Math.round(20 * rate * LIMIT) }, () =>
          Math.floor(next() * 20 * WINDOW_MS),
        );
        times.sort((a, b) => a - b);
        const log = busiestWindow(await admittedTimes("sliding-log", times));
        const counter = busiestWindow(await admittedTimes("sliding-counter", times));
        expect(log).toBe(LIMIT);
        expect(counter).toBeLessThanOrEqual(2 * LIMIT - 1);
        worst = Math.max(worst, counter / LIMIT);
        if (seed === 1) figures.push(`${rate}× → ${counter}`);
      }
    }
    console.log(
      `random traffic, ${LIMIT}/${WINDOW_MS / 1000}s, busiest window of the sliding counter: ${figures.join(", ")}; worst ${(worst * 100).toFixed(0)}% of the limit`,
    );
    expect(worst).toBeLessThan(1.5);
  });
});
