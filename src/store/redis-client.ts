// The Redis connection: fail-fast options for the check path and the Lua scripts as commands.
import { readdirSync, readFileSync } from "node:fs";
import type { Result } from "ioredis";
import { Redis } from "ioredis";

declare module "ioredis" {
  interface RedisCommander<Context> {
    windowHit(
      key: string,
      limit: number,
      windowUs: number,
      member: string,
      nowUs: string,
    ): Result<[number, number, number, number, number], Context>;
    windowPeek(key: string, windowUs: number, nowUs: string): Result<[number, number, number], Context>;
    authorize(
      sessionKey: string,
      indexKey: string,
      userKey: string,
      windowKey: string,
      sessionId: string,
      idleMs: number,
      member: string,
      nowUs: string,
      limitSpec: string,
    ): Result<(number | string)[], Context>;
    sessionTouch(
      sessionKey: string,
      indexKey: string,
      userKey: string,
      sessionId: string,
      idleMs: number,
      nowUs: string,
    ): Result<[number, string?], Context>;
    sessionCreate(
      sessionKey: string,
      indexKey: string,
      userKey: string,
      sessionId: string,
      idleMs: number,
      maxAgeMs: number,
      maxSessions: number,
      passwordHash: string,
      ...fields: string[]
    ): Result<[number, ...string[]], Context>;
    sessionsRevokeAll(indexKey: string): Result<string[], Context>;
    userUpdate(userKey: string, ...fields: string[]): Result<number, Context>;
    usernameRelease(usernameKey: string, goneKey: string, userId: string): Result<number, Context>;
  }
}

const LUA_DIR = new URL("./lua/", import.meta.url);

/**
 * Registers every `lua/<name>-<numberOfKeys>.lua` as the command `<name>` (EVALSHA, EVAL only on
 * NOSCRIPT), with `lua/lib/common.lua` prepended so that the scripts share one window and session code.
 */
export function defineScripts(redis: Redis): void {
  const common = readFileSync(new URL("lib/common.lua", LUA_DIR), "utf8");
  for (const file of readdirSync(LUA_DIR)) {
    const match = /^([A-Za-z]+)-(\d+)\.lua$/.exec(file);
    if (match === null) continue;
    redis.defineCommand(match[1] as string, {
      numberOfKeys: Number(match[2]),
      lua: `${common}\n${readFileSync(new URL(file, LUA_DIR), "utf8")}`,
    });
  }
}

export type RedisClientOptions = {
  url: string;
  connectTimeoutMs?: number;
  /** A backstop for every command; callers put their own, shorter deadlines on calls that need one. */
  commandTimeoutMs?: number;
  /** When false, commands fail at once while disconnected instead of waiting in a queue. */
  offlineQueue?: boolean;
};

export function createRedisClient(options: RedisClientOptions): Redis {
  const redis = new Redis(options.url, {
    commandTimeout: options.commandTimeoutMs ?? 10_000,
    // While disconnected, commands fail at once instead of piling up behind the outage.
    enableOfflineQueue: options.offlineQueue ?? false,
    maxRetriesPerRequest: 1,
    connectTimeout: options.connectTimeoutMs ?? 1_000,
    retryStrategy: (attempt) => Math.min(50 * 2 ** Math.min(attempt, 5), 1000),
    lazyConnect: false,
  });
  defineScripts(redis);
  return redis;
}
