// The Lua scripts, declared once: each name with its key count (a number, or "varies" when the
// caller passes it first), its file lua/<name>[-<keys>].lua, and its TypeScript signature below.
import { readFileSync } from "node:fs";
import type { Cluster, Redis, Result } from "ioredis";

/** A script's reply of one decided window (see lib/common.lua's `answer`), then script-specific fields. */
export type LimitReply = (number | string)[];

declare module "ioredis" {
  interface RedisCommander<Context> {
    /** KEYS: record hash, then sliding-log lists. ARGV: now, mode, record expires, then rule/category pairs. */
    limit(keyCount: number, ...keysAndArgs: string[]): Result<LimitReply, Context>;
    /** KEYS: record hash, then lists. ARGV: the time counted, then rule/category pairs. */
    limitRelease(keyCount: number, ...keysAndArgs: string[]): Result<number, Context>;
    /** KEYS: session, index, user, address record, lists. ARGV: see lua/authorize.lua. */
    authorize(keyCount: number, ...keysAndArgs: string[]): Result<LimitReply, Context>;
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
    nameClaim(usernameKey: string, userId: string, leaseMs: number): Result<[number, string?], Context>;
    nameConfirm(usernameKey: string, userId: string): Result<number, Context>;
    nameTakeover(usernameKey: string, fromId: string, toId: string, leaseMs: number): Result<number, Context>;
  }
}

/** Every script and its number of KEYS. */
export const SCRIPTS = {
  limit: "varies",
  limitRelease: "varies",
  authorize: "varies",
  sessionTouch: 3,
  sessionCreate: 3,
  sessionsRevokeAll: 1,
  userUpdate: 1,
  usernameRelease: 2,
  nameClaim: 1,
  nameConfirm: 1,
  nameTakeover: 1,
} as const satisfies Record<string, number | "varies">;

export type ScriptName = keyof typeof SCRIPTS;

export const LUA_DIR = new URL("./lua/", import.meta.url);

/** The file of a script: `<name>-<keys>.lua`, or `<name>.lua` when its key count varies. */
export const scriptFile = (name: ScriptName): string => {
  const keys = SCRIPTS[name];
  return keys === "varies" ? `${name}.lua` : `${name}-${keys}.lua`;
};

/**
 * Registers every script as a command (EVALSHA, EVAL only on NOSCRIPT), with lua/lib/common.lua
 * prepended so that the scripts share one limiter and session code.
 */
export function defineScripts(redis: Redis | Cluster): void {
  const common = readFileSync(new URL("lib/common.lua", LUA_DIR), "utf8");
  for (const [name, keys] of Object.entries(SCRIPTS) as [ScriptName, number | "varies"][]) {
    const lua = `${common}\n${readFileSync(new URL(scriptFile(name), LUA_DIR), "utf8")}`;
    redis.defineCommand(name, keys === "varies" ? { lua } : { numberOfKeys: keys, lua });
  }
}
