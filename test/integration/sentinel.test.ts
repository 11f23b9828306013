// A Sentinel-managed master (a master, its replica and 3 Sentinels, started once per run): the
// identity and rate-limit contracts run unchanged through the Sentinels.
import { afterAll, describe, expect, it } from "vitest";
import { createKeys } from "../../src/store/redis/keys.js";
import { createRedisStore } from "../../src/store/store.js";
import { describeIdentityContract } from "../contract/identity-contract.js";
import { describeRateLimitContract } from "../contract/rate-limit-contract.js";
import { redisLimiter } from "../support/limiters.js";
import { connectTopology, testPrefix, topologyEnv } from "../support/redis.js";

const redis = connectTopology("sentinel");
afterAll(async () => {
  await redis.quit();
});

describeRateLimitContract("redis sentinel", {
  create: async (now) => ({
    store: redisLimiter({ redis, keys: createKeys(testPrefix()), clock: now }),
    close: async () => {},
  }),
});

describeIdentityContract("redis sentinel", () =>
  createRedisStore({ redis: connectTopology("sentinel"), prefix: testPrefix() }),
);

describe("tollgate through sentinel", () => {
  it("connects to the master the Sentinels name, never to the replica", async () => {
    const role = (await redis.call("ROLE")) as [string, ...unknown[]];
    expect(role[0]).toBe("master");
    const sentinels = topologyEnv("sentinel").REDIS_SENTINELS as string;
    expect(sentinels.split(",")).toHaveLength(3);
  });

  it("never connects with a master name the Sentinels do not know, and says so", async () => {
    const env = { ...topologyEnv("sentinel"), REDIS_SENTINEL_MASTER: "no-such-master" };
    const wrong = connectTopology("sentinel", env);
    const errors: string[] = [];
    wrong.on("error", (error: Error) => errors.push(error.message));
    await expect(wrong.ping()).rejects.toThrow();
    wrong.disconnect();
    expect(errors.some((message) => message.includes("No such master"))).toBe(true);
  });
});
