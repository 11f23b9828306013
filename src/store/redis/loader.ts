// The Lua scripts, declared once: each name with its key count (a number, or "varies" when the
// caller passes it first), its file lua/<name>[-<keys>].lua, and its TypeScript signature below.
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import type { Cluster, Redis, Result } from "ioredis";
import { createWriteCoalescer } from "./coalesce.js";
import { isCluster } from "./is-cluster.js";

/**
 * A limiter script's reply: a packed string (lib/common.lua's `answer`, then script-specific
 * fields), read as a Buffer; or, for authorize's refusals before any window, a short array.
 */
export type LimitReply = Buffer | (number | Buffer)[];

declare module "ioredis" {
  interface RedisCommander<Context> {
    /** KEYS: record hash, then sliding-log lists. ARGV: now, mode, record expires, shadow layers, then rule/category pairs. */
    limitBuffer(keyCount: number, ...keysAndArgs: (string | Buffer)[]): Result<Buffer, Context>;
    /** KEYS: record hash, then lists. ARGV: the time counted, then rule/category pairs. */
    limitRelease(keyCount: number, ...keysAndArgs: (string | Buffer)[]): Result<number, Context>;
    /** KEYS: session, index, user, address record, lists. ARGV: see lua/authorize.lua. */
    authorizeBuffer(keyCount: number, ...keysAndArgs: (string | Buffer)[]): Result<LimitReply, Context>;
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
    sessionsRevokeAll(indexKey: string): Result<number, Context>;
    userUpdate(userKey: string, indexKey: string, ...fields: string[]): Result<number, Context>;
    userDelete(userKey: string, indexKey: string): Result<number, Context>;
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
  userUpdate: 2,
  userDelete: 2,
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

/** What every script and function runs first: lib/common.lua's locals of the standard library. */
const BIND = "if not call then bind_globals() end";

const common = (): string => readFileSync(new URL("lib/common.lua", LUA_DIR), "utf8");
const body = (name: ScriptName): string => readFileSync(new URL(scriptFile(name), LUA_DIR), "utf8");

/**
 * Registers every script as a command (EVALSHA, EVAL only on NOSCRIPT), with lua/lib/common.lua
 * prepended so that the scripts share one limiter and session code.
 */
export function defineScripts(redis: Redis | Cluster): void {
  const lib = common();
  for (const [name, keys] of Object.entries(SCRIPTS) as [ScriptName, number | "varies"][]) {
    const lua = `${lib}\n${BIND}\n${body(name)}`;
    redis.defineCommand(name, keys === "varies" ? { lua } : { numberOfKeys: keys, lua });
  }
}

/** The scripts every check runs. */
const HOT = ["authorize", "limit", "limitRelease"] as const;
type HotName = (typeof HOT)[number];

/**
 * The hot scripts as one Redis function library (Redis 7): the shared code is set up once when
 * the library loads, not on every call as a script's is, which is most of a check's Lua time.
 * Named after its code, so that two tollgate versions sharing a Redis each find their own.
 */
function hotLibrary(): { code: string; functions: Record<HotName, string> } {
  const parts = [common(), ...HOT.map(body)].join("\n");
  const name = `tollgate_${createHash("sha1").update(parts).digest("hex").slice(0, 12)}`;
  const functions = Object.fromEntries(HOT.map((h) => [h, `${name}_${h}`])) as Record<HotName, string>;
  const registered = HOT.map(
    (h) => `redis.register_function('${functions[h]}', function(KEYS, ARGV)\n${BIND}\n${body(h)}\nend)`,
  );
  return { code: `#!lua name=${name}\n${common()}\n${registered.join("\n")}\n`, functions };
}

export type HotScripts = {
  authorize(keys: string[], args: (string | Buffer)[]): Promise<LimitReply>;
  limit(keys: string[], args: (string | Buffer)[]): Promise<Buffer>;
  limitRelease(keys: string[], args: (string | Buffer)[]): Promise<number>;
  /** "functions" once the library answered, "scripts" when this Redis has no functions (before 7). */
  mode(): "functions" | "scripts" | "unknown";
};

/**
 * The hot scripts called as functions (FCALL), loading the library wherever a call finds it
 * missing (a new or restarted server, a master that never saw it); as EVALSHA scripts when the
 * server has no functions or refuses to load them. `functions: false` forces the scripts.
 */
const perClient = new WeakMap<Redis | Cluster, HotScripts>();

/** The client's hot scripts, made once per client (its library loads once per server). */
export function hotScripts(redis: Redis | Cluster): HotScripts {
  let hot = perClient.get(redis);
  if (hot === undefined) {
    hot = createHotScripts(redis, { functions: process.env.TOLLGATE_REDIS_FUNCTIONS !== "off" });
    perClient.set(redis, hot);
  }
  return hot;
}

export function createHotScripts(redis: Redis | Cluster, options: { functions?: boolean } = {}): HotScripts {
  const library = hotLibrary();
  let mode: "functions" | "scripts" | "unknown" = options.functions === false ? "scripts" : "unknown";
  let loading: Promise<void> | undefined;

  const load = (): Promise<void> => {
    loading ??= (async () => {
      const targets = isCluster(redis) ? redis.nodes("master") : [redis];
      await Promise.all(targets.map((node) => node.function("LOAD", "REPLACE", library.code)));
    })().finally(() => {
      loading = undefined;
    });
    return loading;
  };

  const viaScript = (name: HotName, keys: string[], args: (string | Buffer)[]): Promise<unknown> => {
    if (name === "authorize") return redis.authorizeBuffer(keys.length, ...keys, ...args);
    if (name === "limit") return redis.limitBuffer(keys.length, ...keys, ...args);
    return redis.limitRelease(keys.length, ...keys, ...args);
  };

  /** A call that failed: without functions, the scripts; with the library missing, load it and call again. */
  const recover = async (
    error: unknown,
    name: HotName,
    keys: string[],
    args: (string | Buffer)[],
  ): Promise<unknown> => {
    const message = (error as Error).message ?? "";
    if (/unknown command/i.test(message)) {
      mode = "scripts";
      return viaScript(name, keys, args);
    }
    if (!message.includes("Function not found")) throw error;
    try {
      await load();
    } catch (loadError) {
      // No functions here (before Redis 7, or not allowed to load them): the scripts do the same.
      if (/unknown command|unknown subcommand|NOPERM|ERR Unknown/i.test((loadError as Error).message ?? "")) {
        mode = "scripts";
        return viaScript(name, keys, args);
      }
      throw loadError;
    }
    const reply = await redis.callBuffer("FCALL", library.functions[name], keys.length, ...keys, ...args);
    mode = "functions";
    return reply;
  };

  const coalesce = createWriteCoalescer(redis);

  // Plain promise chains: this runs on every check.
  const run = (name: HotName, keys: string[], args: (string | Buffer)[]): Promise<unknown> => {
    coalesce();
    if (mode === "scripts") return viaScript(name, keys, args);
    const reply = redis.callBuffer("FCALL", library.functions[name], keys.length, ...keys, ...args);
    if (mode === "functions") return reply.catch((error: unknown) => recover(error, name, keys, args));
    return reply.then(
      (value: unknown) => {
        mode = "functions";
        return value;
      },
      (error: unknown) => recover(error, name, keys, args),
    );
  };

  return {
    authorize: (keys, args) => run("authorize", keys, args) as Promise<LimitReply>,
    limit: (keys, args) => run("limit", keys, args) as Promise<Buffer>,
    limitRelease: async (keys, args) => Number(await run("limitRelease", keys, args)),
    mode: () => mode,
  };
}
