// The memory store: the shared contract, plus the bounded memory that the embedded default needs.
import { describe, expect, it } from "vitest";
import { logRule } from "../../src/ratelimit/types.js";
import { MAX_KEPT } from "../../src/store/memory/limiter.js";
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

  it("holds at most 200,000 states however many addresses a flood brings within one window", async () => {
    const store = memoryLimiter({ clock: () => 0 });
    const layers = [{ category: "general", rule: logRule(100, 3_600_000) }];
    // docs/security.md states the bound: 200,000.
    for (let i = 0; i < 201_000; i += 1) await store.hit(`ip:2001:db8:${i.toString(16)}::`, layers);
    expect(store.size()).toBe(200_000);
    expect(MAX_KEPT).toBe(200_000);
    store.close();
  });

  it("forgets the state counted least recently when full, and keeps the busy ones", async () => {
    const store = memoryLimiter({ clock: () => 0, maxEntries: 3 });
    const layers = [{ category: "general", rule: logRule(2, 60_000) }];
    await store.hit("ip:10.0.0.1", layers);
    await store.hit("ip:10.0.0.2", layers);
    await store.hit("ip:10.0.0.3", layers);
    // 10.0.0.1 counted again: 10.0.0.2 is now the least recent, and the new address pushes it out.
    await store.hit("ip:10.0.0.1", layers);
    await store.hit("ip:10.0.0.4", layers);
    expect(store.size()).toBe(3);
    expect((await store.hit("ip:10.0.0.1", layers)).allowed).toBe(false);
    expect((await store.peek("ip:10.0.0.2", layers[0] as (typeof layers)[0]))[0]?.used).toBe(0);
    store.close();
  });
});
