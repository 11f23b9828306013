// Invalidations over Redis pub/sub: a subject per message, a connection of its own, and a change's
// answer held until every instance listening has dropped what it cached of the subject.
import { randomUUID } from "node:crypto";
import type { Redis } from "ioredis";
import { withDeadline } from "../failure.js";
import type { InvalidationListener, Invalidations } from "../invalidations.js";
import type { RedisClient } from "./client.js";
import { isCluster } from "./is-cluster.js";
import { scriptsOf } from "./loader.js";
import { dropConnection, silenceError, type WatchdogTimings } from "./watchdog.js";

const noop = (): void => undefined;

/**
 * How long the listed instance `member` may trust its cache after missing an announcement: it trusts
 * it only while it hears a heartbeat sent less than its silenceMs ago, checks that every beat, and a
 * heartbeat it sent after the announcement reaches it after the announcement. So its silenceMs plus
 * two beats after the announcement, it has heard it or turned its cache off.
 */
const trustOf = (member: string): number => Number(member.slice(member.lastIndexOf("/") + 1));

/** Reconnections to one Cluster node before the subscription moves to another (100, 200, 400 ms apart). */
const NODE_ATTEMPTS = 3;

/**
 * The subscription's own connection, or undefined while a Cluster knows no node yet. For a Cluster,
 * a connection to one of its masters (a PUBLISH reaches every node's subscribers), never the Cluster
 * client's own subscriber: ioredis replaces that one when Redis closes it (CLIENT KILL, a pub/sub
 * output buffer past its limit, a node restarted) without an event its user hears, and whatever
 * was announced before it subscribed again would be lost unseen, with the cache still trusted. This
 * one says when it closes; it gives up on a node that does not come back, to be made again to another.
 */
function subscriptionConnection(redis: RedisClient): Redis | undefined {
  if (!isCluster(redis)) return redis.duplicate();
  const masters = redis.nodes("master");
  const node = masters[Math.floor(Math.random() * masters.length)];
  return node?.duplicate({
    lazyConnect: false,
    enableOfflineQueue: false,
    readOnly: false,
    retryStrategy: (attempt: number) => (attempt > NODE_ATTEMPTS ? null : 50 * 2 ** attempt),
  });
}

/** One announcement waiting for the instances listed when it was sent (acknowledgements may come first). */
type Pending = { heard: Set<string>; waiting: Set<string> | undefined; acknowledged(): void };

/**
 * Each instance listens on `<channel>` (bare subjects, as every build sends them), `<channel>:sync`
 * (subjects to acknowledge) and a channel of its own, `<channel>:alive:<id>`, where its heartbeat and
 * the acknowledgements of its announcements arrive. Its heartbeat also lists it in `peersKey`
 * (peerBeat-2.lua) for longer than it can trust its cache without hearing one, so that an instance
 * whose cache is on is listed; `publish` waits for each one listed to acknowledge, or for as long as
 * it may still trust its cache (trustOf), whichever comes first.
 */
export function createRedisInvalidations(options: {
  redis: RedisClient;
  channel: string;
  /** The sorted set listing the instances (keys.ts). */
  peersKey: string;
  /** The count of announcements to acknowledge (keys.ts), in peersKey's slot: `<peersKey>:count` unless given. */
  countKey?: string;
  /** The subscription's own heartbeat: how often it is sent, and how long it may go unheard. */
  heartbeat: WatchdogTimings;
}): Invalidations {
  const { redis, channel, peersKey, heartbeat } = options;
  const countKey = options.countKey ?? `${peersKey}:count`;
  const id = randomUUID();
  const ownChannel = `${channel}:alive:${id}`;
  const syncChannel = `${channel}:sync`;
  /** How long this instance may still trust its cache after an announcement it missed: see trustOf. */
  const trustMs = heartbeat.silenceMs + 2 * heartbeat.intervalMs;
  /** This instance as listed: its id and its trustMs, which another's REDIS_TIMEOUT_MS does not tell. */
  const member = `${id}/${trustMs}`;
  const scripts = scriptsOf(redis);
  const listeners: InvalidationListener[] = [];
  const pending = new Map<number, Pending>();
  let sent = 0;
  /** Whether this instance listens (subscribe was called), and its connection now, if any. */
  let listening = false;
  let closed = false;
  let subscriber: Redis | undefined;
  let subscribed = false;
  /** Redis refused the last SUBSCRIBE (an ACL without the channels): nothing to wait for. */
  let refused = false;
  /** Calls of `publish` waiting for the subscription, which must be up to hear acknowledgements. */
  let onSubscribed: (() => void)[] = [];
  let timer: NodeJS.Timeout | undefined;

  const acknowledged = (text: string): void => {
    const [, number, from] = text.split(" ");
    // "<number>:<count>" as this build sends it, echoed whole.
    const entry = pending.get(Number.parseInt(number ?? "", 10));
    if (entry === undefined || from === undefined) return;
    if (entry.waiting === undefined) entry.heard.add(from);
    else if (entry.waiting.delete(from)) entry.acknowledged();
  };

  /** Resolves once subscribed (or refused), or after `ms`. */
  const whenSubscribed = (ms: number): Promise<void> =>
    subscribed || refused
      ? Promise.resolve()
      : new Promise((resolve) => {
          const wake = () => {
            clearTimeout(late);
            resolve();
          };
          const late = setTimeout(() => {
            onSubscribed = onSubscribed.filter((w) => w !== wake);
            resolve();
          }, ms);
          onSubscribed.push(wake);
        });

  /** Sends the announcement and waits for the acknowledgements of the instances listed. */
  async function announce(subject: string): Promise<void> {
    // Acknowledgements are heard only on the subscription.
    await whenSubscribed(trustMs);
    sent += 1;
    const number = sent;
    const entry: Pending = { heard: new Set(), waiting: undefined, acknowledged: noop };
    pending.set(number, entry);
    try {
      const listed = (await scripts.call(
        "announce",
        [peersKey, countKey],
        [channel, subject, syncChannel, `${id} ${number}`],
      )) as string[];
      const waiting = new Set(listed.filter((peer) => peer !== member && !entry.heard.has(peer)));
      const sentAt = performance.now();
      // Until each has acknowledged, or its trust is over: no listed instance then still trusts a
      // refusal from before the announcement.
      await new Promise<void>((resolve) => {
        let late: NodeJS.Timeout | undefined;
        const arm = (): void => {
          clearTimeout(late);
          if (waiting.size === 0) {
            resolve();
            return;
          }
          const until = Math.max(...[...waiting].map((peer) => sentAt + (trustOf(peer) || trustMs)));
          // Past already (a peer's trust over while others acknowledged): now, without Node's warning.
          late = setTimeout(resolve, Math.max(0, until - performance.now()));
        };
        entry.waiting = waiting;
        entry.acknowledged = arm;
        arm();
      });
    } finally {
      pending.delete(number);
    }
  }

  return {
    publish(subject) {
      // This process at once (the change's own answer must not race its announcement), the others
      // through Redis, before the change answers.
      for (const l of listeners) l.message(subject);
      // A store without a subscription cannot hear acknowledgements: the announcement alone.
      if (!listening) return redis.publish(channel, subject).then(noop);
      return announce(subject);
    },
    subscribe(listener) {
      listeners.push(listener);
      // Untrusted until its heartbeat comes back: announcements sent before that are lost.
      listener.health(false);
      listening = true;
      let healthy = false;
      let subscribedAt = 0;
      /** When the newest heartbeat heard was sent (this process's clock): a late one proves no more than none. */
      let beatSentAt = Number.NEGATIVE_INFINITY;
      const health = (on: boolean): void => {
        if (on === healthy) return;
        healthy = on;
        listener.health(on);
      };
      /** The count of sync messages as of the last one or heartbeat heard since subscribing. */
      let counted: number | undefined;
      /**
       * A count other than the one expected: a sync message never arrived though the subscription
       * stayed up (a Cluster bus link dropped with it in), so whatever is cached may predate a change.
       */
      const count = (total: number, expected: number | undefined): void => {
        if (!Number.isSafeInteger(total)) return;
        if (expected !== undefined && total !== expected) listener.message("*");
        counted = total;
      };
      const down = (): void => {
        subscribed = false;
        counted = undefined;
        health(false);
      };
      const beat = (): void => {
        if (!subscribed) return;
        scripts
          .call("peerBeat", [peersKey, countKey], [member, trustMs, ownChannel, String(performance.now())])
          .catch(noop);
      };
      const onMessage = (from: string, text: string): void => {
        if (from === channel) listener.message(text);
        else if (from === syncChannel) {
          const at = text.indexOf(" ");
          const to = text.indexOf(" ", at + 1);
          if (at < 0 || to < 0) return;
          listener.message(text.slice(to + 1));
          // Builds before the count send none: nothing to check then.
          const colon = text.indexOf(":", at);
          if (colon >= 0 && colon < to) {
            count(Number(text.slice(colon + 1, to)), counted === undefined ? undefined : counted + 1);
          }
          const origin = text.slice(0, at);
          // Acknowledged once dropped: every refusal of the subject cached here is gone.
          if (origin !== id) {
            redis
              .publish(`${channel}:alive:${origin}`, `ack ${text.slice(at + 1, to)} ${member}`)
              .catch(noop);
          }
        } else if (from === ownChannel) {
          if (text.startsWith("ack ")) acknowledged(text);
          else {
            // "<sent at> <count>" (peerBeat-2.lua).
            const [sentAt, total] = text.split(" ");
            count(Number(total), counted);
            beatSentAt = Math.max(beatSentAt, Number(sentAt));
            if (subscribed && performance.now() - beatSentAt <= heartbeat.silenceMs) health(true);
          }
        }
      };
      const connect = (): void => {
        const sub = subscriptionConnection(redis);
        subscriber = sub;
        if (sub === undefined) return;
        sub.on("message", onMessage);
        // Announcements sent while the connection is down are lost: distrust the cache until it is back.
        sub.on("close", down);
        sub.on("end", () => {
          down();
          // A Cluster node given up on: the heartbeat's timer connects to a master the Cluster knows now.
          if (subscriber === sub) subscriber = undefined;
        });
        sub.on("error", noop);
        // Subscribed on every "ready", trusted once its heartbeat comes back: tollgate's clients have
        // no offline queue, so a SUBSCRIBE sent while the connection is still being made is refused
        // at once, and ioredis would then have nothing to subscribe again after a reconnect. A refused
        // SUBSCRIBE (an ACL without the channels) leaves the cache off.
        sub.on("ready", () => {
          sub.subscribe(channel, syncChannel, ownChannel).then(
            () => {
              if (sub.status !== "ready") return;
              subscribed = true;
              refused = false;
              subscribedAt = performance.now();
              for (const wake of onSubscribed.splice(0)) wake();
              beat();
            },
            () => {
              refused = sub.status === "ready";
              if (refused) for (const wake of onSubscribed.splice(0)) wake();
              down();
            },
          );
        });
      };
      connect();
      // A subscription that goes quiet without closing (a dark network path), or lags, would
      // otherwise stay trusted while announcements come late or never: a heartbeat sent less than
      // silenceMs ago proves that they come in time.
      timer = setInterval(() => {
        if (subscriber === undefined && !closed) connect();
        if (subscribed && performance.now() - Math.max(beatSentAt, subscribedAt) > heartbeat.silenceMs) {
          down();
          if (subscriber !== undefined) dropConnection(subscriber, silenceError(heartbeat.silenceMs));
        }
        beat();
      }, heartbeat.intervalMs);
      timer.unref();
    },
    async close() {
      clearInterval(timer);
      closed = true;
      if (!listening) return;
      subscribed = false;
      // Off the list: announcements need not wait for an instance that is gone.
      await withDeadline(redis.zrem(peersKey, member), heartbeat.intervalMs).catch(noop);
      const last = subscriber;
      await last?.quit().catch(() => last.disconnect());
    },
  };
}
