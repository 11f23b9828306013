// Invalidations over Redis pub/sub: one channel, a subject per message, a connection of its own.
import { randomUUID } from "node:crypto";
import type { Invalidations } from "../invalidations.js";
import type { RedisClient } from "./client.js";
import { isCluster } from "./is-cluster.js";
import { dropConnection, silenceError, type WatchdogTimings } from "./watchdog.js";

export function createRedisInvalidations(options: {
  redis: RedisClient;
  channel: string;
  /** The subscription's own heartbeat: how often it is sent, and how long it may go unheard. */
  heartbeat: WatchdogTimings;
}): Invalidations {
  const { redis, channel, heartbeat } = options;
  // A channel of this process's own, so that no process hears the others' heartbeats.
  const aliveChannel = `${channel}:alive:${randomUUID()}`;
  let subscriber: RedisClient | undefined;
  let timer: NodeJS.Timeout | undefined;
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
      let heardAt = 0;
      const health = (on: boolean): void => {
        if (on === healthy) return;
        healthy = on;
        listener.health(on);
      };
      sub.on("message", (from: string, subject: string) => {
        if (from === channel) listener.message(subject);
        else if (from === aliveChannel) heardAt = Date.now();
      });
      // Announcements sent while the connection is down are lost: distrust the cache until it is back.
      sub.on("close", () => health(false));
      sub.on("end", () => health(false));
      sub.on("error", () => undefined);
      // Subscribed on every "ready", healthy once Redis confirms: tollgate's clients have no
      // offline queue, so a SUBSCRIBE sent while the connection is still being made is refused at
      // once, and ioredis would then have nothing to subscribe again after a reconnect.
      sub.on("ready", () => {
        sub.subscribe(channel, aliveChannel).then(
          () => {
            heardAt = Date.now();
            health(sub.status === "ready");
          },
          () => health(false),
        );
      });
      // A subscription that goes quiet without closing (a dark network path) would otherwise stay
      // "healthy" while every announcement is lost: the heartbeat proves messages still arrive.
      timer = setInterval(() => {
        if (healthy && Date.now() - heardAt > heartbeat.silenceMs) {
          health(false);
          if (isCluster(sub)) sub.disconnect(true);
          else dropConnection(sub, silenceError(heartbeat.silenceMs));
        }
        redis.publish(aliveChannel, "").catch(() => undefined);
      }, heartbeat.intervalMs);
      timer.unref();
    },
    async close() {
      clearInterval(timer);
      await subscriber?.quit().catch(() => subscriber?.disconnect());
    },
  };
}
