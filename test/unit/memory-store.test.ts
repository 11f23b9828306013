// The memory store: the shared contract, plus the bounded memory that the embedded default needs.
import { describe, expect, it } from "vitest";
import { logRule } from "../../src/ratelimit/types.js";
import { describeRateLimitContract } from "../contract/rate-limit-contract.js";
import { memoryLimiter } from "../support/limiters.js";

describeRateLimitContract("memory", {
  create: async (now) => {
    const store = memoryLimiter({ clock: now });
    return { store, close: async () => store.close() };
  },
});

describe("memory store housekeeping", () => {
  it("forgets windows once their last request has left them", async () => {
    let now = 0;
    const store = memoryLimiter({ clock: () => now });
    const layers = [{ category: "general", rule: logRule(10, 1_000) }];
    for (let i = 0; i < 1_000; i += 1) await store.hit(`ip:10.0.${i >> 8}.${i & 255}`, layers);
    expect(store.size()).toBe(1_000);
    now = 500;
    await store.hit("ip:10.9.9.9", layers);
    store.sweep();
    expect(store.size()).toBe(1_001);
    now = 1_000;
    store.sweep();
    expect(store.size()).toBe(1);
    now = 1_500;
    store.sweep();
    expect(store.size()).toBe(0);
    store.close();
  });

  it("keeps a long-lived busy window compact", async () => {
    let now = 0;
    const store = memoryLimiter({ clock: () => now });
    const layer = { category: "general", rule: logRule(5, 1_000) };
    let allowed = 0;
    for (let i = 0; i < 100_000; i += 1) {
      now = i * 10;
      if ((await store.hit("u:busy", [layer])).allowed) allowed += 1;
    }
    // 5 per second over 1,000 seconds.
    expect(allowed).toBe(5_000);
    expect((await store.peek("u:busy", layer))[0]?.used).toBe(5);
    store.close();
  });
});
