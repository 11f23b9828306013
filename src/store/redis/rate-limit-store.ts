// The limiter on Redis: one atomic limit.lua call per request, time from Redis TIME.
import { type Clock, isUserSubject, type Layer, type RateLimitStore } from "../../ratelimit/types.js";
import type { RedisClient } from "./client.js";
import { hitFromReply, ruleSpec, usualWindow, windowStatesFromReply } from "./codec.js";
import type { Keys } from "./keys.js";
import { hotScripts } from "./loader.js";
import { createRoomGuesses } from "./room-guesses.js";

export type RedisRateLimitStoreOptions = {
  redis: RedisClient;
  keys: Keys;
  /** Tests only: a pinned clock in ms instead of Redis TIME. */
  clock?: Clock;
};

/** limit.lua's ARGV[4]: a digit per layer, "1" for a shadow one; "" when none is. */
export const shadowLayers = (layers: readonly Layer[]): string =>
  layers.some((l) => l.shadow === true) ? layers.map((l) => (l.shadow === true ? "1" : "0")).join("") : "";

/** The keys and arguments of limit.lua (and limitRelease.lua) for one subject's layers. */
export function limitCall(
  keys: Keys,
  subject: string,
  layers: readonly Layer[],
): { keys: string[]; rules: (string | Buffer)[] } {
  const list = [keys.record(subject)];
  const rules: (string | Buffer)[] = [];
  for (const layer of layers) {
    // Every layer's list: a counter or gcra layer reads it when a change of algorithm left one.
    list.push(keys.log(subject, layer.category));
    rules.push(ruleSpec(layer.rule), layer.category);
  }
  return { keys: list, rules };
}

export function createRedisRateLimitStore(options: RedisRateLimitStoreOptions): RateLimitStore {
  const { redis, keys, clock } = options;
  const hot = hotScripts(redis);
  const nowArg = (): string => (clock === undefined ? "" : String(Math.round(clock() * 1000)));
  const expires = (subject: string): string => (isUserSubject(subject) ? "0" : "1");
  // One-layer windows whose last answer left room: limit.lua's mode "3".
  const rooms = createRoomGuesses();

  return {
    async hit(subject, layers, hitOptions) {
      const call = limitCall(keys, subject, layers);
      const dryRun = hitOptions?.dryRun === true;
      const window = layers.length === 1 ? `${subject}\n${layers[0]?.category}` : undefined;
      const mode = dryRun ? "0" : window !== undefined && rooms.expects(window) ? "3" : "1";
      const args = [nowArg(), mode, expires(subject), shadowLayers(layers), ...call.rules];
      const reply = await hot.limit(call.keys, args);
      const hit = hitFromReply(reply, usualWindow(layers));
      if (window !== undefined && !dryRun) rooms.learn(window, hit);
      return hit;
    },

    async peek(subject, layer) {
      const call = limitCall(keys, subject, [layer]);
      const reply = await redis.limitBuffer(
        call.keys.length,
        ...call.keys,
        nowArg(),
        "2",
        expires(subject),
        "",
        ...call.rules,
      );
      return windowStatesFromReply(reply);
    },

    async reset(subject, categories) {
      if (categories.length === 0) return;
      await redis.del(...categories.map((c) => keys.log(subject, c)));
      await redis.hdel(keys.record(subject), ...categories.map((c) => `r:${c}`));
    },
  };
}
