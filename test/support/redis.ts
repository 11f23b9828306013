// Per-file Redis clients with the tollgate scripts loaded and a key prefix of their own.
import { randomBytes } from "node:crypto";
import type { Redis } from "ioredis";
import { inject } from "vitest";
import { createRedisClient } from "../../src/store/redis-client.js";

export function testPrefix(): string {
  return `test:${randomBytes(4).toString("hex")}:`;
}

export function redisUrl(): string {
  return inject("redisUrl");
}

export function connectRedis(url = redisUrl()): Redis {
  return createRedisClient({ url, commandTimeoutMs: 5000, offlineQueue: true });
}
