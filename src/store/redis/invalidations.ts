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
      // Untrusted until its heartbeat comes back: announcements sent before that are lost.
      listener.health(false);
      const sub = redis.duplicate();
      subscriber = sub;
      let healthy = false;
      let subscribed = false;
      let subscribedAt = 0;
      /** When the newest heartbeat heard was sent (this process's clock): a late one proves no more than none. */
      let beatSentAt = Number.NEGATIVE_INFINITY;
      const health = (on: boolean): void => {
        if (on === healthy) return;
        healthy = on;
        listener.health(on);
      };
      const down = (): void => {
        subscribed = false;
        health(false);
      };
      const beat = (): void => {
        if (subscribed) redis.publish(aliveChannel, String(performance.now())).catch(() => undefined);
      };
      sub.on("message", (from: string, text: string) => {
        if (from === channel) listener.message(text);
        else if (from === aliveChannel) {
          beatSentAt = Math.max(beatSentAt, Number(text));
          if (subscribed && performance.now() - beatSentAt <= heartbeat.silenceMs) health(true);
        }
      });
      // Announcements sent while the connection is down are lost: distrust the cache until it is back.
      sub.on("close", down);
      sub.on("end", down);
      sub.on("error", () => undefined);
      // Subscribed on every "ready", trusted once its heartbeat comes back: tollgate's clients have
      // no offline queue, so a SUBSCRIBE sent while the connection is still being made is refused
      // at once, and ioredis would then have nothing to subscribe again after a reconnect. A refused
      // SUBSCRIBE (an ACL without the channels) leaves the cache off.
      sub.on("ready", () => {
        sub.subscribe(channel, aliveChannel).then(() => {
          if (sub.status !== "ready") return;
          subscribed = true;
          subscribedAt = performance.now();
          beat();
        }, down);
      });
      // A subscription that goes quiet without closing (a dark network path), or lags, would
      // otherwise stay trusted while announcements come late or never: a heartbeat sent less than
      // silenceMs ago proves that they come in time.
      timer = setInterval(() => {
        if (subscribed && performance.now() - Math.max(beatSentAt, subscribedAt) > heartbeat.silenceMs) {
          down();
          if (isCluster(sub)) sub.disconnect(true);
          else dropConnection(sub, silenceError(heartbeat.silenceMs));
        }
        beat();
      }, heartbeat.intervalMs);
      timer.unref();
    },
    async close() {
      clearInterval(timer);
      await subscriber?.quit().catch(() => subscriber?.disconnect());
    },
  };
}
