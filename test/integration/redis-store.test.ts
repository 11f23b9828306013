// The Redis store runs the shared contract against a real redis-server, with a pinned clock.
import { afterAll } from "vitest";
import { createKeys } from "../../src/store/redis/keys.js";
import { describeRateLimitContract } from "../contract/rate-limit-contract.js";
import { redisLimiter } from "../support/limiters.js";
import { connectRedis, testPrefix } from "../support/redis.js";

const redis = connectRedis();
afterAll(async () => {
  await redis.quit();
});

describeRateLimitContract("redis", {
  create: async (now) => ({
    store: redisLimiter({ redis, keys: createKeys(testPrefix()), clock: now }),
    close: async () => {},
  }),
});
