// The reference's fixed window on Redis without a script (see ratelimit/reference-window.ts): per
// layer one INCRBY of a key that names the window's start, all sent in the same write as the
// call's other commands. A script's fixed cost in Redis (FCALL, its argument tables, TIME, the
// record's HMGET and HSET) is several times an INCRBY's; this is what envoyproxy/ratelimit makes
// Redis do, less its EXPIRE on every call.
//
// The window comes from this process's clock, as the reference's does: tollgate processes whose
// clocks differ by d count, for d after each boundary, in two windows (the reference has the same
// property). The key's expiry is set once, by the call that made the key (INCRBY answered exactly
// its addend), right after the answer and without waiting for it (again for a few seconds if that
// fails). A process that dies between the two leaves a key without expiry: it never changes an
// answer (no later window reads it), and at most one is left per layer counted for the first time
// in its window at that moment.
import type {
  LayerResult,
  LimiterPort,
  LimitLayer,
  LimitRequest,
  LimitResult,
} from "../../ratelimit/limiter.js";
import { countsByWindow, windowAnswer, windowStartOf } from "../../ratelimit/reference-window.js";
import type { Clock } from "../../ratelimit/types.js";
import type { RedisClient } from "./client.js";
import { coalescerOf } from "./coalesce.js";
import type { Keys } from "./keys.js";
import { scriptsOf } from "./loader.js";

/**
 * How long a window's key outlives the window: past it, a process whose clock is behind still finds
 * its count. Up to a minute (the window itself for a shorter one).
 */
const MAX_MARGIN_MS = 60_000;
/** A key's PEXPIRE that fails (a lost connection) is sent again a second later, this many times. */
const EXPIRE_RETRIES = 5;

/** What a request counts: its hits (or only a look), and the caller's withdrawal (see Withdrawal). */
type Count = Pick<LimitRequest, "addend" | "dryRun" | "withdrawal">;

type WindowCounter = {
  /** Each layer's answer, in order. */
  layers(layers: readonly LimitLayer[], count: Count): Promise<LayerResult[]>;
  /** The answer of a request whose layers are all reference windows, without an identity. */
  request(layers: readonly LimitLayer[], count: Count): Promise<LimitResult>;
};

export function createWindowCounter(redis: RedisClient, keys: Keys, clock: Clock): WindowCounter {
  const coalesce = coalescerOf(redis);
  const scripts = scriptsOf(redis);
  /** The key's expiry, relative (Redis's clock may differ from ours); tried again while the connection fails. */
  const expire = (key: string, untilMs: number, attempt = 0): void => {
    redis.pexpire(key, Math.max(1, untilMs - clock())).catch(() => {
      if (attempt < EXPIRE_RETRIES) setTimeout(() => expire(key, untilMs, attempt + 1), 1_000).unref();
    });
  };
  /** One layer's command sent, and its answer, as `shape` makes it, when it comes. */
  const countOne = <T>(
    layer: LimitLayer,
    { addend: k = 1, dryRun: dry, withdrawal }: Count,
    nowMs: number,
    shape: (result: LayerResult) => T,
  ): Promise<T> => {
    const windowMs = (layer.rule.windows[0] as { windowMs: number }).windowMs;
    const startMs = windowStartOf(nowMs, windowMs);
    const key = keys.window(layer.subject, layer.category, startMs);
    if (dry || k === 0) {
      return redis
        .get(key)
        .then((value) =>
          shape(windowAnswer(layer.rule, value === null ? 0 : Number(value), k, nowMs, false)),
        );
    }
    return redis.incrby(key, k).then((count) => {
      if (count === k) expire(key, startMs + windowMs + Math.min(windowMs, MAX_MARGIN_MS));
      // Taken back should the caller refuse the request without this answer (fire and forget).
      withdrawal?.counted(() => {
        scripts.call("windowRelease", [key], [k]).catch(() => undefined);
      });
      return shape(windowAnswer(layer.rule, count - k, k, nowMs, true));
    });
  };
  const counted = (layers: readonly LimitLayer[], count: Count): Promise<LayerResult[]> => {
    const nowMs = clock();
    coalesce();
    // Every command is sent before any answer is awaited: one round trip (one per slot on a cluster).
    if (layers.length === 1) return countOne(layers[0] as LimitLayer, count, nowMs, alone);
    return Promise.all(layers.map((layer) => countOne(layer, count, nowMs, same)));
  };
  return {
    layers: counted,
    request(layers, count) {
      if (layers.length !== 1) return counted(layers, count).then(limited);
      const nowMs = clock();
      coalesce();
      return countOne(layers[0] as LimitLayer, count, nowMs, limitedOne);
    },
  };
}

const same = (result: LayerResult): LayerResult => result;
const alone = (result: LayerResult): LayerResult[] => [result];
const limitedOne = (result: LayerResult): LimitResult => limited([result]);

/**
 * The port with a request's reference windows (mode each) counted by `count`, in the same round
 * trip as the script that counts its other layers, if any; answers in the request's layer order.
 */
export function withWindowCounts(port: LimiterPort, count: WindowCounter): LimiterPort {
  /** Reference windows and other layers (or an identity) in one request. */
  const mixed = async (request: LimitRequest): Promise<LimitResult> => {
    const apart: LimitLayer[] = [];
    const rest: LimitLayer[] = [];
    const isApart = request.layers.map((l) => {
      const yes = countsByWindow(l.rule, "each");
      (yes ? apart : rest).push(l);
      return yes;
    });
    const counted = count.layers(apart, request);
    const others =
      rest.length > 0 || request.identity !== undefined
        ? port.limit({ ...request, layers: rest })
        : undefined;
    const [mine, theirs] = await Promise.all([counted, others]);
    if (theirs !== undefined && theirs.kind !== "limited") return theirs;
    let a = 0;
    let r = 0;
    const layers = isApart.map((yes) =>
      yes ? (mine[a++] as LayerResult) : (theirs?.layers[r++] as LayerResult),
    );
    // The user's layer, when the request had an identity, comes last.
    if (theirs !== undefined) layers.push(...theirs.layers.slice(r));
    return { kind: "limited", allowed: layers.every(hasRoom), layers, identity: theirs?.identity };
  };
  return {
    reset: (subject, categories) => port.reset(subject, categories),
    limit(request) {
      if (request.mode !== "each" || !request.layers.some(byWindow)) return port.limit(request);
      // The usual call of the rate limit service: every layer a reference window, no identity.
      if (request.identity === undefined && request.layers.every(byWindow)) {
        return count.request(request.layers, request);
      }
      return mixed(request);
    },
  };
}

const byWindow = (layer: LimitLayer): boolean => countsByWindow(layer.rule, "each");

const hasRoom = (layer: LayerResult): boolean => layer.room;

const limited = (layers: LayerResult[]): LimitResult => ({
  kind: "limited",
  allowed: layers.every(hasRoom),
  layers,
  identity: undefined,
});
