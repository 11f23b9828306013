// What Redis saw: command counts per check (INFO commandstats, MONITOR) and memory per window entry.
import { Redis } from "ioredis";
import { monitorRedis } from "../../test/support/local.mjs";

const SCRIPT_COMMANDS = ["evalsha", "eval", "evalsha_ro", "eval_ro", "fcall", "fcall_ro"];
/** The bench's own commands between CONFIG RESETSTAT and INFO, which Redis counts too. */
const OWN_COMMANDS = ["config|resetstat", "info"];

export function connectRedis(url) {
  return new Redis(url, { maxRetriesPerRequest: 1, lazyConnect: false });
}

export async function resetStats(redis) {
  await redis.config("RESETSTAT");
}

function parseInfo(text) {
  const fields = new Map();
  for (const line of text.split("\r\n")) {
    const at = line.indexOf(":");
    if (at > 0 && !line.startsWith("#")) fields.set(line.slice(0, at), line.slice(at + 1));
  }
  return fields;
}

/** Redis's own CPU seconds so far (INFO cpu: used_cpu_sys + used_cpu_user), networking included. */
export async function redisCpuSeconds(redis) {
  const info = parseInfo(await redis.info("cpu"));
  return Number(info.get("used_cpu_sys") ?? Number.NaN) + Number(info.get("used_cpu_user") ?? Number.NaN);
}

/**
 * Command counts since the last CONFIG RESETSTAT. Redis counts the commands that a script runs in
 * commandstats and in total_commands_processed as well, so `scriptCalls` (FCALL, EVALSHA, EVAL) is the
 * number of round trips that ran a script and `all` includes every command run inside them.
 */
export async function commandCounts(redis) {
  const info = parseInfo(await redis.info("commandstats"));
  const byCommand = {};
  const usecByCommand = {};
  /** Microseconds Redis spent in each script command, the commands it ran included. */
  let scriptUsec = 0;
  for (const [key, value] of info) {
    if (!key.startsWith("cmdstat_")) continue;
    const name = key.slice("cmdstat_".length);
    byCommand[name] = Number(/calls=(\d+)/.exec(value)?.[1] ?? 0);
    usecByCommand[name] = Number(/usec=(\d+)/.exec(value)?.[1] ?? 0);
    if (SCRIPT_COMMANDS.includes(name)) scriptUsec += usecByCommand[name];
  }
  let all = 0;
  let scriptCalls = 0;
  let allUsec = 0;
  for (const [name, calls] of Object.entries(byCommand)) {
    if (OWN_COMMANDS.includes(name)) continue;
    all += calls;
    allUsec += usecByCommand[name];
    if (SCRIPT_COMMANDS.includes(name)) scriptCalls += calls;
  }
  // Every tollgate's invalidations heartbeat is a script call too, not a check's: it is counted by
  // its ZREMRANGEBYSCORE, which nothing else runs (rls-report.mjs).
  scriptCalls -= byCommand.zremrangebyscore ?? 0;
  // Commands run inside a script count in its usec and again on their own: where scripts ran, their
  // usec is the time; otherwise (INCR + PEXPIRE) the commands' own.
  const topLevelUsec = scriptCalls > 0 ? scriptUsec : allUsec;
  return { byCommand, usecByCommand, all, scriptCalls, scriptUsec, topLevelUsec };
}

/**
 * Each tollgate's upkeep, once a second whatever the load and from every process on this Redis: its
 * connection watchdog's PING and its invalidations heartbeat (an FCALL of peerBeat-2.lua; an older
 * build's, a PUBLISH to its own `…:alive:` channel).
 */
const isUpkeep = (name, args) =>
  (name === "ping" && args.length === 1) ||
  (name === "publish" && String(args[1]).includes(":alive:")) ||
  (name === "fcall" && String(args[1]).startsWith("tollgate_peerBeat_"));

/**
 * Runs `work` with a MONITOR attached and counts the commands by origin: MONITOR marks the commands a
 * script ran with "lua", so what is left are the round trips clients made (less the processes' upkeep,
 * counted apart as it is not per check). MONITOR slows Redis down,
 * so this is a short sample next to the measured rows, not part of them.
 */
export async function monitorSample(url, work) {
  const counts = { topLevel: 0, inScript: 0, topLevelByCommand: {}, upkeepByCommand: {} };
  // A script runs whole: the commands MONITOR shows after its call, from inside it, are its own.
  let inUpkeep = false;
  const monitor = await monitorRedis(url, (args, source) => {
    const name = String(args[0]).toLowerCase();
    if (source === "lua") {
      if (inUpkeep) counts.upkeepByCommand[name] = (counts.upkeepByCommand[name] ?? 0) + 1;
      else counts.inScript += 1;
      return;
    }
    inUpkeep = isUpkeep(name, args);
    if (inUpkeep) {
      counts.upkeepByCommand[name] = (counts.upkeepByCommand[name] ?? 0) + 1;
      return;
    }
    counts.topLevel += 1;
    counts.topLevelByCommand[name] = (counts.topLevelByCommand[name] ?? 0) + 1;
  });
  try {
    await work();
    // Let the last replies of the sample reach the monitor stream.
    await new Promise((r) => setTimeout(r, 200));
  } finally {
    monitor.close();
  }
  return counts;
}

/** Bytes of one key (`MEMORY USAGE … SAMPLES 0`: every element), and per list entry for a sliding log. */
export async function windowBytes(redis, key) {
  const [bytes, type, encoding] = await Promise.all([
    redis.call("MEMORY", "USAGE", key, "SAMPLES", "0"),
    redis.type(key),
    redis.object("ENCODING", key),
  ]);
  const entries = type === "list" ? await redis.llen(key) : undefined;
  return {
    key,
    bytes: Number(bytes),
    entries,
    encoding,
    bytesPerEntry: entries === undefined || entries === 0 ? Number.NaN : Number(bytes) / entries,
  };
}
