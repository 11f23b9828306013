// The limiter on Redis: one atomic lua/limit.lua call per request (time from Redis TIME), the
// session read in the same call; the reference's fixed windows of the rate limit service by INCRBY
// in the same round trip (window-counts.ts). On Redis Cluster a call touches one subject's keys (one slot):
// the layers of other subjects (a client address's) are counted in calls of their own, first, and
// taken back when a later call refuses the request (all-or-none).
import type { Proof } from "../../auth/subjects.js";
import type { Rule } from "../../config/rules.js";
import {
  countsAll,
  type IdentityLayer,
  type IdentityResult,
  type LayerResult,
  type LimiterPort,
  type LimitLayer,
  type LimitRequest,
  type LimitResult,
} from "../../ratelimit/limiter.js";
import { type Clock, isUserSubject, userSubject } from "../../ratelimit/types.js";
import type { RedisClient } from "./client.js";
import {
  parseWindowsSpec,
  refusalOf,
  replyLayers,
  replyNowUs,
  replySessionExpiresAtMs,
  replyStatus,
  replyText,
  ruleText,
  tierTable,
} from "./codec.js";
import { isCluster } from "./is-cluster.js";
import type { Keys } from "./keys.js";
import { scriptsOf } from "./loader.js";
import { LUA_CONSTANTS as C } from "./protocol.js";
import { createWindowCounter, withWindowCounts } from "./window-counts.js";

export type RedisLimiterOptions = {
  redis: RedisClient;
  keys: Keys;
  /** Tests only: a pinned clock in ms instead of Redis TIME. */
  clock?: Clock;
};

/** The user's rule when neither the tier's rule nor the user's own windows are known here. */
const NO_WINDOWS: Rule = { algorithm: "sliding-log", windows: [] };

/** Refused users as profile.lua finds one, " <id> <id> " (ids hold no space): made once per set. */
const refusedTexts = new WeakMap<ReadonlySet<string>, string>();
function refusedText(users: ReadonlySet<string> | undefined): string {
  if (users === undefined || users.size === 0) return "";
  let text = refusedTexts.get(users);
  if (text === undefined) {
    text = ` ${[...users].join(" ")} `;
    refusedTexts.set(users, text);
  }
  return text;
}

/** A profile's proof as limit.lua reads it (see lua/includes/profile.lua): a letter, then its value. */
function proofText(proof: Proof): string {
  if (proof.kind === "subject") return `x${proof.tier}`;
  return `${proof.markUsed ? "K" : "k"}${proof.hash}${refusedText(proof.refusedUsers)}`;
}

/** limit.lua's mode argument for each sum of flags, counting the request as one. */
const MODES = ["0", "1", "2", "3", "4", "5", "6", "7"];

/** A fixed layer's digit (LAYER_SHADOW and LAYER_EXPIRING added together). */
const LAYER_KINDS = ["0", "1", "2", "3"];

/** A bounded cache of parsed own rules. */
const MAX_CACHED = 10_000;

type Call = { layers: readonly LimitLayer[]; identity?: IdentityLayer | undefined };
type Answer = { result: LimitResult; nowUs: number };

export function createRedisLimiter(options: RedisLimiterOptions): LimiterPort {
  const { redis, keys, clock } = options;
  const scripts = scriptsOf(redis);
  const split = isCluster(redis);
  const ownRules = new Map<string, Rule | undefined>();

  /** The user's own windows (text of the user hash) with the algorithm of the tier's rule. */
  const ownRule = (text: string, tierRule: Rule | undefined): Rule | undefined => {
    const key = `${tierRule?.algorithm ?? "sliding-log"}|${text}`;
    if (!ownRules.has(key)) {
      if (ownRules.size >= MAX_CACHED) ownRules.clear();
      ownRules.set(key, parseWindowsSpec(text, tierRule?.algorithm ?? "sliding-log"));
    }
    return ownRules.get(key);
  };

  /** One limit.lua call: its keys, its arguments. */
  const argsOf = (call: Call, request: LimitRequest, dry: boolean) => {
    const list: string[] = [];
    const flags =
      (dry ? C.FLAG_DRY_RUN : 0) +
      (request.mode === "each" ? C.FLAG_EACH : 0) +
      (call.identity === undefined ? 0 : C.FLAG_IDENTITY);
    const k = request.addend ?? 1;
    // The mode: the flags' digit, then ":<k>" unless the request counts as one (see limit.lua).
    const args: (string | number)[] = [k === 1 ? (MODES[flags] as string) : `${flags}:${k}`];
    for (const l of call.layers) {
      list.push(keys.record(l.subject), keys.log(l.subject, l.category));
      args.push(
        ruleText(l.rule),
        `r:${l.category}`,
        LAYER_KINDS[
          (l.shadow === true ? C.LAYER_SHADOW : 0) + (isUserSubject(l.subject) ? 0 : C.LAYER_EXPIRING)
        ] as string,
      );
    }
    const id = call.identity;
    if (id?.kind === "profile") {
      const profile = id.proof.kind === "key" ? keys.record(id.subject) : keys.profile(id.subject);
      list.push(profile, profile, keys.record(id.subject), keys.log(id.subject, id.category));
      args.push(proofText(id.proof), tierTable(id.category, id.rules));
    } else if (id !== undefined) {
      list.push(keys.session(id.userId, id.sessionId), keys.sessionIndex(id.userId), keys.user(id.userId));
      list.push(keys.log(userSubject(id.userId), id.category));
      // The session id is the session key's tail: the script reads it there when it needs it.
      args.push(id.idleMs, tierTable(id.category, id.rules));
    }
    // A pinned clock's now, last (µs); without one the script reads Redis TIME.
    if (clock !== undefined) args.push(String(Math.round(clock() * 1000)));
    return { list, args };
  };

  const run = async (call: Call, request: LimitRequest, dry: boolean): Promise<Answer> => {
    const { list, args } = argsOf(call, request, dry);
    const reply = (await scripts.callBuffer("limit", list, args)) as Buffer;
    const status = replyStatus(reply);
    const nowUs = replyNowUs(reply);
    const refusal = refusalOf(status, reply);
    if (refusal !== undefined) return { result: refusal, nowUs };
    let identity: IdentityResult | undefined;
    if (call.identity !== undefined && status === C.STATUS_OK) {
      // "<tier>" or "<tier>\n<own windows>"; a profile's "<tier>\n<own windows>\n<user>"
      const text = replyText(reply);
      const cut = text.indexOf("\n");
      const tier = cut === -1 ? text : text.slice(0, cut);
      const tierRule = call.identity.rules.get(tier);
      let own = cut === -1 ? "" : text.slice(cut + 1);
      let userId: string | undefined;
      if (call.identity.kind === "profile") {
        const end = own.indexOf("\n");
        userId = own.slice(end + 1) || undefined;
        own = own.slice(0, end);
      }
      const mine = own === "" ? undefined : ownRule(own, tierRule);
      const rule = mine ?? tierRule ?? NO_WINDOWS;
      identity = { tier, rule, ownRule: mine, sessionExpiresAtMs: replySessionExpiresAtMs(reply), userId };
    }
    const layers = replyLayers(reply, call.layers, identity?.rule);
    // All-or-none counts the request when every layer has room or is in shadow mode.
    let allowed = true;
    let everyCounts = true;
    for (let i = 0; i < layers.length; i += 1) {
      if ((layers[i] as LayerResult).room) continue;
      allowed = false;
      if (call.layers[i]?.shadow !== true) everyCounts = false;
    }
    const k = request.addend ?? 1;
    const counting = status === C.STATUS_OK && k > 0 && (request.mode === "each" || everyCounts);
    const each = request.mode === "each";
    for (let i = 0; i < layers.length; i += 1) {
      const l = layers[i] as LayerResult;
      // In mode each a fixed window counts a refused hit too (limit.lua does the same).
      l.counted = counting && (l.room || (each && call.layers[i]?.rule.algorithm === "fixed-window"));
    }
    const answer: Answer = { result: { kind: "limited", allowed, layers, identity }, nowUs };
    // Should the caller refuse the request without this answer (before it came, or on another
    // part's failure), nothing of it stays.
    if (!dry && counting) request.withdrawal?.counted(() => release(call, answer, k));
    return answer;
  };

  /** A call's layer `i`: one of its fixed layers, or after them the user's, under the rule it was counted by. */
  const layerAt = (call: Call, i: number, identity: IdentityResult | undefined): LimitLayer | undefined => {
    const fixed = call.layers[i];
    if (fixed !== undefined) return fixed;
    const id = call.identity;
    if (id === undefined || identity === undefined) return undefined;
    const subject = id.kind === "profile" ? id.subject : userSubject(id.userId);
    return { subject, category: id.category, rule: identity.rule };
  };

  /**
   * Takes back a call's counted layers, once (fire and forget: a failed release leaves them counted,
   * the safe side).
   */
  const release = (call: Call, answer: Answer, k: number): void => {
    if (answer.result.kind !== "limited") return;
    const { layers, identity } = answer.result;
    for (let i = 0; i < layers.length; i += 1) {
      const l = layers[i] as LayerResult;
      const layer = l.counted ? layerAt(call, i, identity) : undefined;
      l.counted = false;
      if (layer === undefined) continue;
      const list = [keys.record(layer.subject), keys.log(layer.subject, layer.category)];
      scripts
        .callBuffer("limitRelease", list, [answer.nowUs, k, ruleText(layer.rule), layer.category])
        .catch(() => undefined);
    }
  };

  /**
   * Redis Cluster, several subjects: a call per subject, the user's last. All-or-none: a call that
   * refuses takes the earlier calls' counts back; the later ones only look (a dry run), or, when
   * the user's call is among them, are not made at all (refused before the session is looked at).
   */
  const clustered = async (request: LimitRequest, calls: Call[]): Promise<LimitResult> => {
    const dry = request.dryRun === true;
    const k = request.addend ?? 1;
    if (request.mode === "each") {
      const answers = await Promise.all(calls.map((c) => run(c, request, dry)));
      return merge(answers.map((a) => a.result));
    }
    const done: { call: Call; answer: Answer }[] = [];
    let refused = false;
    for (const call of calls) {
      // The caller refused the request meanwhile and reads no answer: what was counted is taken
      // back (see run), nothing more is sent.
      if (request.withdrawal?.refused === true) break;
      if (refused && call.identity !== undefined) {
        const layers = done.flatMap((d) =>
          d.answer.result.kind === "limited" ? d.answer.result.layers : [],
        );
        return { kind: "limited", allowed: false, layers, identity: undefined };
      }
      const answer = await run(call, request, dry || refused);
      done.push({ call, answer });
      const r = answer.result;
      const shadow = (i: number) => call.layers[i]?.shadow === true;
      if (refused || (r.kind === "limited" && countsAll(r.layers, shadow))) continue;
      // This call refused: the earlier ones counted what must not stay counted.
      refused = true;
      if (!dry) for (const d of done.slice(0, -1)) release(d.call, d.answer, k);
      if (r.kind !== "limited") return r;
    }
    return merge(done.map((d) => d.answer.result));
  };

  const port: LimiterPort = {
    async limit(request) {
      // One call for every layer (a request is a call of its own), or on a cluster one per subject.
      if (!split) return (await run(request, request, request.dryRun === true)).result;
      const calls = callsBySubject(request);
      if (calls.length === 1) return (await run(calls[0] as Call, request, request.dryRun === true)).result;
      return clustered(request, calls);
    },

    async reset(subject, categories) {
      if (categories.length === 0) return;
      await redis.del(...categories.map((c) => keys.log(subject, c)));
      await redis.hdel(keys.record(subject), ...categories.map((c) => `r:${c}`));
    },
  };
  // The reference's fixed windows (mode each) without a script; the rest through limit.lua.
  return withWindowCounts(port, createWindowCounter(redis, keys, clock ?? Date.now));
}

/** The layers grouped per subject (one slot each), in order, the user's identity with the user's subject, last. */
function callsBySubject(request: LimitRequest): Call[] {
  const groups = new Map<string, LimitLayer[]>();
  for (const l of request.layers) {
    const group = groups.get(l.subject) ?? [];
    group.push(l);
    groups.set(l.subject, group);
  }
  const id = request.identity;
  const own = id === undefined ? undefined : id.kind === "profile" ? id.subject : userSubject(id.userId);
  const calls: Call[] = [];
  for (const [subject, layers] of groups) if (subject !== own) calls.push({ layers, identity: undefined });
  if (id !== undefined) calls.push({ layers: groups.get(own as string) ?? [], identity: id });
  else if (own !== undefined && groups.has(own))
    calls.push({ layers: groups.get(own) ?? [], identity: undefined });
  return calls;
}

/** Several calls' answers as one: the first refusal of the session, else every layer in order. */
function merge(results: LimitResult[]): LimitResult {
  const layers: LayerResult[] = [];
  let identity: IdentityResult | undefined;
  for (const r of results) {
    if (r.kind !== "limited") return r;
    layers.push(...r.layers);
    identity ??= r.identity;
  }
  return { kind: "limited", allowed: layers.every((l) => l.room), layers, identity };
}
