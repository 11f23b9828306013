// The one loader: every script in lua/ is loaded as a Redis function library of its own (FUNCTION
// LOAD, Redis 7 and later) and called with FCALL. A script's first line names the parts of
// lua/includes/ it uses (`-- Includes: prelude layer …`); its library holds those parts, the shared
// constants (protocol.ts) and the script as one function, whose set-up code runs once per load
// rather than on every call. A library is named after its code, so two tollgate versions sharing a
// Redis each find their own; a call that finds its function missing (a new or restarted server, a
// master that never saw it) loads every library and calls again.
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import type { Cluster, Redis } from "ioredis";
import { coalescerOf } from "./coalesce.js";
import { isCluster } from "./is-cluster.js";
import { prebuiltFcall, untimedFcall } from "./prebuilt-fcall.js";
import { luaConstants } from "./protocol.js";

/** Every script and its number of KEYS ("varies": the caller passes them). */
export const SCRIPTS = {
  limit: "varies",
  limitRelease: "varies",
  windowRelease: 1,
  sessionTouch: 3,
  sessionCreate: 3,
  sessionsRevokeAll: 1,
  userUpdate: 2,
  userDelete: 2,
  usernameRelease: 2,
  nameClaim: 1,
  nameConfirm: 1,
  nameTakeover: 1,
  profileUpdate: 1,
  peerBeat: 2,
  announce: 2,
} as const satisfies Record<string, number | "varies">;

export type ScriptName = keyof typeof SCRIPTS;

export const LUA_DIR = new URL("./lua/", import.meta.url);

/** The file of a script: `<name>-<keys>.lua`, or `<name>.lua` when its key count varies. */
export const scriptFile = (name: ScriptName): string => {
  const keys = SCRIPTS[name];
  return keys === "varies" ? `${name}.lua` : `${name}-${keys}.lua`;
};

const read = (path: string): string => readFileSync(new URL(path, LUA_DIR), "utf8");

/** The includes a script's first line names, in its order. */
export function includesOf(body: string): string[] {
  const first = /^-- Includes:([^\n]*)/.exec(body);
  return first === null ? [] : (first[1] as string).trim().split(/\s+/);
}

/** A script's library: its name, its function's name and its code. */
export function libraryOf(name: ScriptName): { library: string; fn: string; code: string } {
  const body = read(scriptFile(name));
  const parts = includesOf(body).map((part) => read(`includes/${part}.lua`));
  const shared = [parts[0] ?? "", luaConstants(), ...parts.slice(1)].join("\n");
  const hash = createHash("sha1").update(shared).update(body).digest("hex").slice(0, 12);
  const library = `tollgate_${name}_${hash}`;
  const bind = parts.length > 0 ? "if not call then bind_globals() end\n" : "";
  const code =
    `#!lua name=${library}\n${shared}\n` +
    `redis.register_function('${library}', function(KEYS, ARGV)\n${bind}${body}\nend)\n`;
  return { library, fn: library, code };
}

type Arg = string | Buffer | number;

export type Scripts = {
  /** FCALL of a script, its reply as ioredis gives strings. */
  call(name: ScriptName, keys: readonly string[], args: readonly Arg[]): Promise<unknown>;
  /** The same with string replies as Buffers (the limiter's packed answers). */
  callBuffer(name: ScriptName, keys: readonly string[], args: readonly Arg[]): Promise<unknown>;
};

const perClient = new WeakMap<Redis | Cluster, Scripts>();

/** The client's scripts, made once per client (the libraries load once per server). */
export function scriptsOf(redis: Redis | Cluster): Scripts {
  let scripts = perClient.get(redis);
  if (scripts === undefined) {
    scripts = createScripts(redis);
    perClient.set(redis, scripts);
  }
  return scripts;
}

function createScripts(redis: Redis | Cluster): Scripts {
  const libraries = Object.fromEntries(
    (Object.keys(SCRIPTS) as ScriptName[]).map((name) => [name, libraryOf(name)]),
  ) as Record<ScriptName, ReturnType<typeof libraryOf>>;
  let loading: Promise<void> | undefined;
  const load = (): Promise<void> => {
    loading ??= (async () => {
      const targets = isCluster(redis) ? redis.nodes("master") : [redis];
      const codes = Object.values(libraries).map((l) => l.code);
      await Promise.all(
        targets.flatMap((node) => codes.map((code) => node.function("LOAD", "REPLACE", code))),
      );
    })().finally(() => {
      loading = undefined;
    });
    return loading;
  };
  // One write to Redis per event-loop turn for the limiter's calls, which every check makes.
  const coalesce = coalescerOf(redis);
  const split = isCluster(redis);

  const make =
    (buffers: boolean) =>
    (name: ScriptName, keys: readonly string[], args: readonly Arg[]): Promise<unknown> => {
      const fn = libraries[name].fn;
      // The limiter's calls, which every check makes: one write per turn, and no backstop timer.
      const hot = name === "limit" || name === "limitRelease";
      const fcall = () => {
        const prebuilt = split ? undefined : prebuiltFcall(fn, keys, args, buffers, !hot);
        if (prebuilt !== undefined) return (redis as Redis).sendCommand(prebuilt) as Promise<unknown>;
        if (hot) return redis.sendCommand(untimedFcall(fn, keys, args, buffers)) as Promise<unknown>;
        return buffers
          ? redis.callBuffer("FCALL", fn, keys.length, ...keys, ...args)
          : redis.call("FCALL", fn, keys.length, ...keys, ...args);
      };
      if (hot) coalesce();
      return fcall().catch(async (error: unknown) => {
        if (!String((error as Error).message).includes("Function not found")) throw error;
        await load();
        return fcall();
      });
    };
  return { call: make(false), callBuffer: make(true) };
}
