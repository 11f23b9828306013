// Settings a server refuses while a client connects: REDIS_URL's database (ioredis then goes on in
// database 0), a Sentinel master name that no Sentinel monitors (ioredis calls that "All sentinels
// are unreachable"). Each is kept per client, for start-up to stop on, and makes the error clearer.
import type { Cluster, Redis } from "ioredis";
import {
  databaseRefusedProblem,
  type RedisTopology,
  unknownSentinelMasterProblem,
} from "../../config/redis-settings.js";

type RedisClient = Redis | Cluster;

const refused = new WeakMap<RedisClient, string>();
/** The error ioredis emitted, and the same failure told in terms of the setting. */
const clearer = new WeakMap<Error, Error>();

/** The setting the server refused on this client's connection, as a problem naming it. */
export const refusedSetting = (client: RedisClient): string | undefined => refused.get(client);

/** The error as a person should read it: the setting's problem when the error came from one. */
export const clearError = (error: Error): Error => clearer.get(error) ?? error;

type ReplyError = Error & { command?: { name?: string; args?: unknown[] } };

function watchDatabase(client: Redis): void {
  client.on("error", (error: ReplyError) => {
    if (error.command?.name !== "select") return;
    const problem = databaseRefusedProblem(String(error.command.args?.[0] ?? "?"), error.message);
    refused.set(client, problem);
    clearer.set(error, new Error(problem));
  });
}

// ioredis reports each Sentinel it asked as a "sentinelError", then the round as an "error".
const ANSWERED_WITHOUT_MASTER =
  /sentinel (\S+) (?:because .*No such master|successfully, but got an invalid reply)/;
const ROUND_FAILED = /^All sentinels are unreachable/;

function watchSentinels(client: Redis, master: string): void {
  let answered: string[] = [];
  client.on("sentinelError", (error: Error) => {
    const address = ANSWERED_WITHOUT_MASTER.exec(error.message)?.[1];
    if (address !== undefined) answered.push(address);
  });
  client.on("error", (error: Error) => {
    if (!ROUND_FAILED.test(error.message)) return;
    if (answered.length > 0) {
      const problem = unknownSentinelMasterProblem(master, [...new Set(answered)]);
      refused.set(client, problem);
      clearer.set(error, new Error(problem));
    }
    answered = [];
  });
  // The Sentinels know the name now (a monitor added since): nothing stands refused.
  client.on("ready", () => refused.delete(client));
}

/** Records what the server refuses of `topology` on `client`'s connections. */
export function watchRefusals(client: RedisClient, topology: RedisTopology): void {
  if (topology.kind === "single") watchDatabase(client as Redis);
  else if (topology.kind === "sentinel") watchSentinels(client as Redis, topology.master);
}
