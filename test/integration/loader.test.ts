// The one loader: every script a function library of its own, loaded where a call finds it
// missing; the limiter's calls of one event-loop turn go to Redis in one write; one reply format.

import { readFileSync } from "node:fs";
import { afterAll, describe, expect, it } from "vitest";
import { logRule } from "../../src/ratelimit/types.js";
import { MAX_BATCH } from "../../src/store/redis/coalesce.js";
import { replyStatus, replyText, ruleText } from "../../src/store/redis/codec.js";
import { createKeys } from "../../src/store/redis/keys.js";
import {
  includesOf,
  LUA_DIR,
  SCRIPTS,
  type ScriptName,
  scriptFile,
  scriptsOf,
} from "../../src/store/redis/loader.js";
import { prebuiltFcall } from "../../src/store/redis/prebuilt-fcall.js";
import { LUA_CONSTANTS } from "../../src/store/redis/protocol.js";
import { redisLimiter } from "../support/limiters.js";
import { startRedisServer } from "../support/processes.mjs";
import { connectRedis, testPrefix } from "../support/redis.js";

const redis = connectRedis();
afterAll(async () => {
  await redis.quit();
});

describe("the loader", () => {
  it("loads a script's library where a call finds it missing, and uses it from then on", async () => {
    // A server of its own: FUNCTION FLUSH on the shared one makes another file's check run its call
    // twice (found missing, then loaded), or fail when the second flush falls between the two.
    const server = await startRedisServer();
    const own = connectRedis(server.url);
    try {
      const limiter = redisLimiter({ redis: own, keys: createKeys(testPrefix()) });
      const layers = [{ category: "general", rule: logRule(2, 60_000) }];
      await own.function("FLUSH");
      expect((await limiter.hit("ip:192.0.2.80", layers)).allowed).toBe(true);
      // A server that lost its functions (a restart without persistence) gets them again.
      await own.function("FLUSH");
      expect((await limiter.hit("ip:192.0.2.80", layers)).allowed).toBe(true);
      expect((await limiter.hit("ip:192.0.2.80", layers)).allowed).toBe(false);
      const listed = (await own.function("LIST")) as unknown[][];
      expect(listed.flat().filter((v) => String(v).startsWith("tollgate_limit_")).length).toBeGreaterThan(0);
    } finally {
      own.disconnect();
      await server.stop();
    }
  });

  it("gives each script only the includes its first line names, each of them existing", () => {
    for (const name of Object.keys(SCRIPTS) as ScriptName[]) {
      const body = readFileSync(new URL(scriptFile(name), LUA_DIR), "utf8");
      for (const part of includesOf(body)) {
        expect(
          () => readFileSync(new URL(`includes/${part}.lua`, LUA_DIR)),
          `${name}: ${part}`,
        ).not.toThrow();
      }
    }
    expect(includesOf(readFileSync(new URL("nameClaim-1.lua", LUA_DIR), "utf8"))).toEqual(["prelude"]);
  });

  it("sends the calls of one event-loop turn to Redis in one write, and each later turn's in its own", async () => {
    // A server of its own: INFO's read count is server-wide.
    const server = await startRedisServer();
    const own = connectRedis(server.url);
    const observer = connectRedis(server.url);
    try {
      const limiter = redisLimiter({ redis: own, keys: createKeys(testPrefix()) });
      const layers = [{ category: "general", rule: logRule(30, 60_000) }];
      const hit = () => limiter.hit("ip:192.0.2.81", layers);
      await hit(); // loads the library
      const reads = async () =>
        Number(/total_reads_processed:(\d+)/.exec(await observer.info("stats"))?.[1] ?? Number.NaN);

      const before = await reads();
      const replies = await Promise.all(Array.from({ length: 40 }, hit));
      const together = (await reads()) - before - 1; // minus the INFO's own read
      expect(replies.filter((reply) => reply.allowed)).toHaveLength(29);
      // 40 calls of about 150 bytes: one write, which Redis may take in a read or two.
      expect(together).toBeLessThanOrEqual(2);

      const start = await reads();
      for (let i = 0; i < 10; i += 1) await hit();
      expect((await reads()) - start - 1).toBeGreaterThanOrEqual(10);

      // A bigger turn leaves in writes of at most MAX_BATCH calls each (node's writev, one per write).
      const socket = own.stream as unknown as { _writev(chunks: unknown[], cb: () => void): void };
      const writev = socket._writev.bind(socket);
      const sizes: number[] = [];
      socket._writev = (chunks, cb) => {
        sizes.push(chunks.length);
        writev(chunks, cb);
      };
      await Promise.all(Array.from({ length: 3 * MAX_BATCH + 4 }, hit));
      socket._writev = writev;
      expect(sizes).toEqual([MAX_BATCH, MAX_BATCH, MAX_BATCH, 4]);
    } finally {
      own.disconnect();
      observer.disconnect();
      await server.stop();
    }
  });

  it("answers in one format: four doubles, the text, then three doubles per window", async () => {
    const keys = createKeys(testPrefix());
    const subject = "ip:192.0.2.82";
    const two = {
      algorithm: "sliding-log" as const,
      windows: [
        { limit: 2, windowMs: 60_000 },
        { limit: 5, windowMs: 600_000 },
      ],
    };
    // counted (no flags), one request; one fixed layer: its rule, its record field, enforced and expiring
    const args = ["0", ruleText(two), "r:search", String(LUA_CONSTANTS.LAYER_EXPIRING)];
    const reply = (await scriptsOf(redis).callBuffer(
      "limit",
      [keys.record(subject), keys.log(subject, "search")],
      args,
    )) as Buffer;
    expect(reply.length).toBe(32 + 2 * 24);
    expect([replyStatus(reply), replyText(reply)]).toEqual([LUA_CONSTANTS.STATUS_OK, ""]);
    // used 1 in each window, and no wait
    expect([
      reply.readDoubleLE(32),
      reply.readDoubleLE(48),
      reply.readDoubleLE(56),
      reply.readDoubleLE(72),
    ]).toEqual([1, 0, 1, 0]);
  });
});

describe("a prebuilt FCALL", () => {
  it("reaches Redis with every key and argument as sent, multi-byte and numbers included, its reply as asked", async () => {
    const library = `#!lua name=tollgate_test_echo\nredis.register_function('tollgate_test_echo', function(KEYS, ARGV)\n  local all = {}\n  for i = 1, #KEYS do all[#all + 1] = KEYS[i] end\n  for i = 1, #ARGV do all[#all + 1] = ARGV[i] end\n  return table.concat(all, '|')\nend)`;
    await redis.function("LOAD", "REPLACE", library);
    const keys = [`${testPrefix()}{é}:ключ`, `${testPrefix()}{é}:\r\n`];
    const args = ["", "🙂 two words", 4_294_967_295, 0.5];
    const text = prebuiltFcall("tollgate_test_echo", keys, args, false);
    const buffers = prebuiltFcall("tollgate_test_echo", keys, args, true);
    if (text === undefined || buffers === undefined) throw new Error("no prebuilt command");
    const expected = [...keys, "", "🙂 two words", "4294967295", "0.5"].join("|");
    expect(await redis.sendCommand(text)).toBe(expected);
    const reply = await redis.sendCommand(buffers);
    expect(Buffer.isBuffer(reply)).toBe(true);
    expect(String(reply)).toBe(expected);
    // Buffers go through ioredis's own command.
    expect(prebuiltFcall("tollgate_test_echo", keys, [Buffer.from("x")], true)).toBeUndefined();
    // A Redis error rejects the call as ioredis's own command does.
    const missing = prebuiltFcall("tollgate_test_missing", [], [], false);
    await expect(redis.sendCommand(missing as NonNullable<typeof missing>)).rejects.toThrow(
      /Function not found/,
    );
  });
});
