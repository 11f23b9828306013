// A separate Node process that hits one window through the built Redis store, on command.
// Started with fork(); waits for {go: true}, fires its hits at once and reports how many passed.

import { createLimiter } from "../../dist/src/ratelimit/limiter.js";
import { createRedisClient } from "../../dist/src/store/redis/client.js";
import { createKeys } from "../../dist/src/store/redis/keys.js";
import { createRedisLimiter } from "../../dist/src/store/redis/limiter.js";

const [url, prefix, subject, hits, limit, windowMs, algorithm = "sliding-log"] = process.argv.slice(2);
const redis = createRedisClient({ url, commandTimeoutMs: 10_000, offlineQueue: true });
await redis.ping();
const store = createLimiter(createRedisLimiter({ redis, keys: createKeys(prefix) }));
const layers = [
  {
    category: "general",
    rule: { algorithm, windows: [{ limit: Number(limit), windowMs: Number(windowMs) }] },
  },
];

process.on("message", async () => {
  const results = await Promise.all(Array.from({ length: Number(hits) }, () => store.hit(subject, layers)));
  process.send({
    allowed: results.filter((r) => r.allowed).length,
    denied: results.filter((r) => !r.allowed).length,
  });
  await redis.quit();
  process.disconnect();
});
process.send({ ready: true });
