// The identity scripts (sessions, users, usernames) as typed calls: each passes its keys and
// arguments as its file's header (lua/<name>-<keys>.lua) lists them.
import type { RedisClient } from "./client.js";
import { type ScriptName, scriptsOf } from "./loader.js";

type Arg = string | number;

export type IdentityScripts = {
  sessionTouch(
    sessionKey: string,
    indexKey: string,
    userKey: string,
    sessionId: string,
    idleMs: number,
    nowUs: string,
  ): Promise<[number, string?]>;
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
  ): Promise<[number, ...string[]]>;
  sessionsRevokeAll(indexKey: string): Promise<number>;
  userUpdate(userKey: string, indexKey: string, ...fields: string[]): Promise<number>;
  userDelete(userKey: string, indexKey: string): Promise<number>;
  usernameRelease(usernameKey: string, goneKey: string, userId: string, remember: 0 | 1): Promise<number>;
  nameClaim(usernameKey: string, userId: string, leaseMs: number): Promise<[number, string?]>;
  nameConfirm(usernameKey: string, userId: string): Promise<number>;
  nameTakeover(usernameKey: string, fromId: string, toId: string, leaseMs: number): Promise<number>;
};

const perClient = new WeakMap<RedisClient, IdentityScripts>();

/** The client's identity scripts, made once per client. */
export function identityScripts(redis: RedisClient): IdentityScripts {
  let made = perClient.get(redis);
  if (made === undefined) {
    made = createIdentityScripts(redis);
    perClient.set(redis, made);
  }
  return made;
}

function createIdentityScripts(redis: RedisClient): IdentityScripts {
  const scripts = scriptsOf(redis);
  const call = <T>(name: ScriptName, keys: string[], args: Arg[]) =>
    scripts.call(name, keys, args) as Promise<T>;
  return {
    sessionTouch: (s, i, u, sid, idle, now) => call("sessionTouch", [s, i, u], [sid, idle, now]),
    sessionCreate: (s, i, u, ...args) => call("sessionCreate", [s, i, u], args),
    sessionsRevokeAll: (index) => call("sessionsRevokeAll", [index], []),
    userUpdate: (user, index, ...fields) => call("userUpdate", [user, index], fields),
    userDelete: (user, index) => call("userDelete", [user, index], []),
    usernameRelease: (name, gone, id, remember) => call("usernameRelease", [name, gone], [id, remember]),
    nameClaim: (name, id, lease) => call("nameClaim", [name], [id, lease]),
    nameConfirm: (name, id) => call("nameConfirm", [name], [id]),
    nameTakeover: (name, from, to, lease) => call("nameTakeover", [name], [from, to, lease]),
  };
}
