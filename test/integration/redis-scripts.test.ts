// Without Redis functions (before Redis 7, or not allowed to load them) the hot scripts run as
// EVALSHA scripts: the same contract holds, and the switch is made by itself.
import { afterAll, describe, expect, it } from "vitest";
import { logRule } from "../../src/ratelimit/types.js";
import { MAX_BATCH } from "../../src/store/redis/coalesce.js";
import {
  ANSWER_BYTES,
  hitFromReply as hitOf,
  ruleSpec,
  USUAL_ANSWER_BYTES,
} from "../../src/store/redis/codec.js";
import { createKeys } from "../../src/store/redis/keys.js";
import { createHotScripts } from "../../src/store/redis/loader.js";
import { createRedisRateLimitStore } from "../../src/store/redis/rate-limit-store.js";
import { describeRateLimitContract } from "../contract/rate-limit-contract.js";
import { startRedisServer } from "../support/processes.mjs";
import { connectRedis, testPrefix } from "../support/redis.js";

// Every store of this file runs its hot scripts as scripts, as on a Redis without functions.
process.env.TOLLGATE_REDIS_FUNCTIONS = "off";

const redis = connectRedis();
afterAll(async () => {
  await redis.quit();
});

describeRateLimitContract("redis, as scripts", {
  create: async (now) => ({
    store: createRedisRateLimitStore({ redis, keys: createKeys(testPrefix()), clock: now }),
    close: async () => {},
  }),
});

describe("the hot scripts", () => {
  it("load their function library where a call finds it missing, and use it from then on", async () => {
    const own = connectRedis();
    const hot = createHotScripts(own, { functions: true });
    const keys = createKeys(testPrefix());
    const call = (subject: string) => [keys.record(subject), keys.log(subject, "general")];
    const rule = logRule(2, 60_000);
    const args = ["", "1", "1", "", ruleSpec(rule), "general"];
    const hitFromReply = (reply: Buffer) => hitOf(reply, rule.windows[0]);
    expect(hot.mode()).toBe("unknown");
    await own.function("FLUSH");
    expect(hitFromReply(await hot.limit(call("ip:192.0.2.80"), args)).allowed).toBe(true);
    expect(hot.mode()).toBe("functions");
    // A server that lost its functions (a restart without persistence) gets them again.
    await own.function("FLUSH");
    expect(hitFromReply(await hot.limit(call("ip:192.0.2.80"), args)).allowed).toBe(true);
    expect(hitFromReply(await hot.limit(call("ip:192.0.2.80"), args)).allowed).toBe(false);
    const listed = (await own.function("LIST")) as unknown[][];
    expect(listed.flat().some((v) => String(v).startsWith("tollgate_"))).toBe(true);
    own.disconnect();
  });

  it("send the calls of one event-loop turn to Redis in one write, and each later turn's in its own", async () => {
    // A server of its own: INFO's read count is server-wide.
    const server = await startRedisServer();
    const own = connectRedis(server.url);
    const observer = connectRedis(server.url);
    try {
      const hot = createHotScripts(own, { functions: true });
      const keys = createKeys(testPrefix());
      const call = [keys.record("ip:192.0.2.81"), keys.log("ip:192.0.2.81", "general")];
      const rule = logRule(30, 60_000);
      const args = ["", "1", "1", "", ruleSpec(rule), "general"];
      const hitFromReply = (reply: Buffer) => hitOf(reply, rule.windows[0]);
      await hot.limit(call, args); // loads the library
      const reads = async () =>
        Number(/total_reads_processed:(\d+)/.exec(await observer.info("stats"))?.[1] ?? Number.NaN);

      const before = await reads();
      const replies = await Promise.all(Array.from({ length: 40 }, () => hot.limit(call, args)));
      const together = (await reads()) - before - 1; // minus the INFO's own read
      expect(replies.filter((reply) => hitFromReply(reply).allowed)).toHaveLength(29);
      // 40 calls of about 150 bytes: one write, which Redis may take in a read or two.
      expect(together).toBeLessThanOrEqual(2);

      const start = await reads();
      for (let i = 0; i < 10; i += 1) await hot.limit(call, args);
      expect((await reads()) - start - 1).toBeGreaterThanOrEqual(10);

      // A bigger turn leaves in writes of at most MAX_BATCH calls each (node's writev, one per write).
      const socket = own.stream as unknown as { _writev(chunks: unknown[], cb: () => void): void };
      const writev = socket._writev.bind(socket);
      const sizes: number[] = [];
      socket._writev = (chunks, cb) => {
        sizes.push(chunks.length);
        writev(chunks, cb);
      };
      await Promise.all(Array.from({ length: 3 * MAX_BATCH + 4 }, () => hot.limit(call, args)));
      socket._writev = writev;
      expect(sizes).toEqual([MAX_BATCH, MAX_BATCH, MAX_BATCH, 4]);
    } finally {
      own.disconnect();
      observer.disconnect();
      await server.stop();
    }
  });

  it("answer a rule of one window in five doubles, completed by the rule the store sent", async () => {
    const own = connectRedis();
    const hot = createHotScripts(own, { functions: true });
    const keys = createKeys(testPrefix());
    const subject = "ip:192.0.2.82";
    const one = logRule(2, 60_000);
    const lists = [keys.record(subject), keys.log(subject, "general")];
    const usual = await hot.limit(lists, ["", "1", "1", "", ruleSpec(one), "general"]);
    expect(usual.length).toBe(USUAL_ANSWER_BYTES);
    expect(usual.readDoubleLE(0)).toBe(3);
    expect(hitOf(usual, one.windows[0])).toMatchObject({ allowed: true, limit: 2, used: 1, remaining: 1 });
    expect(() => hitOf(usual, undefined)).toThrow(/one-window answer/);
    const two = {
      algorithm: "sliding-log" as const,
      windows: [
        { limit: 2, windowMs: 60_000 },
        { limit: 5, windowMs: 600_000 },
      ],
    };
    const searchLists = [keys.record(subject), keys.log(subject, "search")];
    const full = await hot.limit(searchLists, ["", "1", "1", "", ruleSpec(two), "search"]);
    expect(full.length).toBe(ANSWER_BYTES);
    expect(full.readDoubleLE(0)).toBe(1);
    expect(hitOf(full, undefined)).toMatchObject({ allowed: true, limit: 2, used: 1, remaining: 1 });
    own.disconnect();
  });
});
