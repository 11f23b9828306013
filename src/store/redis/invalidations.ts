// Invalidations over Redis pub/sub: one channel, a subject per message, a connection of its own.
import type { Invalidations } from "../invalidations.js";
import type { RedisClient } from "./client.js";

export function createRedisInvalidations(options: { redis: RedisClient; channel: string }): Invalidations {
  const { redis, channel } = options;
  let subscriber: RedisClient | undefined;
  const listeners: { message(subject: string): void }[] = [];
  return {
    publish(subject) {
      // This process at once (the change's own answer must not race its announcement), the
      // others through Redis within a round trip. A lost announcement leaves a refusal cached
      // until its window frees: the safe side.
      for (const l of listeners) l.message(subject);
      redis.publish(channel, subject).catch(() => undefined);
    },
    subscribe(listener) {
      listeners.push(listener);
      const sub = redis.duplicate();
      subscriber = sub;
      let healthy = false;
      const health = (on: boolean): void => {
        if (on === healthy) return;
        healthy = on;
        listener.health(on);
      };
      sub.on("message", (from: string, subject: string) => {
        if (from === channel) listener.message(subject);
      });
      // Announcements sent while the connection is down are lost: distrust the cache until it is back.
      sub.on("close", () => health(false));
      sub.on("end", () => health(false));
      sub.on("error", () => undefined);
      // Subscribed on every "ready", healthy once Redis confirms: tollgate's clients have no
      // offline queue, so a SUBSCRIBE sent while the connection is still being made is refused at
      // once, and ioredis would then have nothing to subscribe again after a reconnect.
      sub.on("ready", () => {
        sub.subscribe(channel).then(
          () => health(sub.status === "ready"),
          () => health(false),
        );
      });
    },
    async close() {
      await subscriber?.quit().catch(() => subscriber?.disconnect());
    },
  };
}
