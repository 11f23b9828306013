// The JWT secret kept in Redis (JWT_SECRET unset, outside production): a stored value too weak to sign
// with stops start-up with one line, and an unreachable Redis stops it after a bounded wait.
import { randomBytes } from "node:crypto";
import { afterAll, describe, expect, it } from "vitest";
import { withSharedJwtSecret } from "../../src/auth/jwt-secret.js";
import { loadConfig } from "../../src/config/env.js";
import { createLogger } from "../../src/process/logger.js";
import { createRedisClient } from "../../src/store/redis/client.js";
import { createRedisStore, type Store } from "../../src/store/store.js";
import { freePort } from "../support/ports.js";
import { connectRedis, redisUrl, testPrefix } from "../support/redis.js";

const silent = createLogger("silent");
/** main.ts's `fail`, as an exception the test can read. */
const fail = (problems: string[]): never => {
  throw new Error(problems.join("\n"));
};
const configFor = (prefix: string, url = redisUrl()) =>
  loadConfig({
    REDIS_URL: url,
    REDIS_KEY_PREFIX: prefix,
    ADMIN_TOKEN: "z".repeat(8) + randomBytes(24).toString("hex"),
  });

const redis = connectRedis();
const stores: Store[] = [];
afterAll(async () => {
  for (const store of stores) await store.close();
  await redis.quit();
});

/** The settings withSharedJwtSecret gives a start on a prefix whose key holds `kept` (unset: none). */
async function startWith(kept: string | undefined, prefix = testPrefix()) {
  if (kept !== undefined) await redis.set(`${prefix}jwt:secret`, kept);
  const store = createRedisStore({ redis: connectRedis(), prefix });
  stores.push(store);
  return withSharedJwtSecret({ config: configFor(prefix), store, logger: silent, fail });
}

describe("the JWT secret kept in Redis", () => {
  it("is generated and kept on a first start, and read back on the next", async () => {
    const prefix = testPrefix();
    const first = await startWith(undefined, prefix);
    expect(first.jwt.secret).toBe(await redis.get(`${prefix}jwt:secret`));
    expect((await startWith(undefined, prefix)).jwt.secret).toBe(first.jwt.secret);
    const strong = randomBytes(48).toString("base64");
    expect((await startWith(strong)).jwt.secret).toBe(strong);
  });

  it.each([
    ["empty", "", /shorter than 32 bytes/],
    ["one character", "Q", /shorter than 32 bytes/],
    ["31 random bytes' worth of characters", "kP3vX9qL2mT7wR4nB8cF1hJ6sD0gY5a", /shorter than 32 bytes/],
    ["long but one character repeated", "Q".repeat(48), /too predictable/],
    ["a value published in the repository", "demo-only-jwt-secret-do-not-use-in-production", /published/],
  ])(
    "stops start-up when it is %s, naming the key and JWT_SECRET, never the value",
    async (_what, kept, why) => {
      const prefix = testPrefix();
      const started = startWith(kept, prefix);
      await expect(started).rejects.toThrow(why);
      const message = ((await started.catch((error: Error) => error)) as Error).message;
      expect(message.split("\n")).toHaveLength(1);
      expect(message).toContain(`the JWT secret kept in Redis (${prefix}jwt:secret) is refused`);
      expect(message).toContain("set JWT_SECRET");
      if (kept.length > 1) expect(message).not.toContain(kept);
    },
  );

  it("stops start-up within the wait when Redis does not answer, saying JWT_SECRET removes the need", async () => {
    const url = `redis://127.0.0.1:${await freePort()}`;
    const prefix = testPrefix();
    const store = createRedisStore({ redis: createRedisClient({ url }), prefix });
    stores.push(store);
    const began = Date.now();
    const started = withSharedJwtSecret({
      config: configFor(prefix, url),
      store,
      logger: silent,
      fail,
      waitMs: 1_500,
    });
    await expect(started).rejects.toThrow(
      /^the store is unreachable \(.*\) and JWT_SECRET is unset: the JWT secret kept in Redis \(.*jwt:secret\) is needed before tollgate listens, and Redis did not answer within 1\.5 s\. Start Redis, or set JWT_SECRET/,
    );
    expect(Date.now() - began).toBeGreaterThan(1_000);
    expect(Date.now() - began).toBeLessThan(3_000);
  }, 10_000);
});
