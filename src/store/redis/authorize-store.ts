// The check's Redis call: the IP layer, session validity, the user's current tier and windows, atomically.

import type { AuthorizeRequest, AuthorizeResult, AuthorizeStore } from "../../ratelimit/authorize-port.js";
import type { HitResult, Rule } from "../../ratelimit/types.js";
import { IP_LAYER, userSubject } from "../../ratelimit/types.js";
import type { RedisClient } from "./client.js";
import {
  ANSWER_BYTES,
  answerNowUs,
  hitFromReply,
  isUsualAnswer,
  parseWindowsSpec,
  ruleSpec,
  tierTable,
  USUAL_ANSWER_BYTES,
  usualWindow,
} from "./codec.js";
import { isCluster } from "./is-cluster.js";
import type { Keys } from "./keys.js";
import { hotScripts } from "./loader.js";
import { limitCall } from "./rate-limit-store.js";
import { createRoomGuesses } from "./room-guesses.js";

/** A bounded cache of parsed own rules. */
const MAX_CACHED = 10_000;
function remember<K, V>(map: Map<K, V>, key: K, value: V): void {
  if (map.size >= MAX_CACHED) map.clear();
  map.set(key, value);
}

export function createRedisAuthorizeStore(options: { redis: RedisClient; keys: Keys }): AuthorizeStore {
  const { redis, keys } = options;
  const hot = hotScripts(redis);
  // On Redis Cluster the IP layer's keys and the user's live in different slots: two calls.
  const split = isCluster(redis);
  const ownRules = new Map<string, Rule>();
  // (user, category) windows whose last answer left room: authorize.lua's ARGV[5] "2".
  const rooms = createRoomGuesses();

  const ownRule = (text: string, tierRule: Rule | undefined): Rule | undefined => {
    const key = `${tierRule?.algorithm ?? "sliding-log"}|${text}`;
    let rule = ownRules.get(key);
    if (rule === undefined) {
      rule = parseWindowsSpec(text, tierRule?.algorithm ?? "sliding-log");
      if (rule !== undefined) remember(ownRules, key, rule);
    }
    return rule;
  };

  /** One authorize.lua call; `ip` only when its keys may share the call (not on a cluster). */
  const call = async (request: AuthorizeRequest, withIp: boolean): Promise<AuthorizeResult> => {
    const { userId, sessionId, category, rules, ip, idleMs, dryRun } = request;
    const subject = userSubject(userId);
    const ipLayer = withIp ? ip : undefined;
    const list = [keys.session(userId, sessionId), keys.sessionIndex(userId), keys.user(userId)];
    const window = `${userId}\n${category}`;
    const args: (string | Buffer)[] = [
      sessionId,
      String(idleMs),
      category,
      tierTable(rules),
      dryRun ? "0" : rooms.expects(window) ? "2" : "1",
    ];
    if (ipLayer !== undefined) {
      list.push(keys.record(ipLayer.subject));
      list.push(keys.log(ipLayer.subject, IP_LAYER));
      args.push(ruleSpec(ipLayer.rule), "1", ipLayer.shadow === true ? "1" : "0");
    }
    list.push(keys.log(subject, category));
    const reply = await hot.authorize(list, args);
    if (!Buffer.isBuffer(reply)) {
      const status = reply[0] as number;
      if (status === -1) return { kind: "no_session" };
      if (status === -2) return { kind: "user_inactive" };
      return { kind: "unknown_tier", tier: String(reply[1]) };
    }
    if (isUsualAnswer(reply)) {
      // The tier's rule of one window: the answer, the session's expiry, the tier.
      const tier = reply.toString("utf8", USUAL_ANSWER_BYTES + 8);
      const hit = hitFromReply(reply, rules.get(tier)?.windows[0]);
      if (!dryRun) rooms.learn(window, hit);
      return {
        kind: "ok",
        tier,
        hit,
        ownRule: undefined,
        sessionExpiresAtMs: reply.readDoubleLE(USUAL_ANSWER_BYTES),
      };
    }
    const hit = hitFromReply(reply, undefined);
    if (!dryRun) rooms.learn(window, hit);
    const rest = reply.toString("utf8", ANSWER_BYTES + 8);
    const cut = rest.indexOf("\n");
    const tier = cut === -1 ? rest : rest.slice(0, cut);
    if (tier === "") return { kind: "ip_denied", hit };
    const own = cut === -1 ? "" : rest.slice(cut + 1);
    return {
      kind: "ok",
      tier,
      hit,
      ownRule: own === "" ? undefined : ownRule(own, rules.get(tier)),
      sessionExpiresAtMs: reply.readDoubleLE(ANSWER_BYTES),
    };
  };

  /**
   * Redis Cluster: the IP layer first, in its own slot; taken back if the user's layer refuses. A
   * full one refuses at once, unless in shadow mode: then the session and the user's layer decide.
   */
  const clustered = async (request: AuthorizeRequest, ip: NonNullable<AuthorizeRequest["ip"]>) => {
    const layers = [{ category: IP_LAYER, rule: ip.rule }];
    const ipCall = limitCall(keys, ip.subject, layers);
    const mode = request.dryRun ? "0" : "1";
    const ipReply = await hot.limit(ipCall.keys, ["", mode, "1", "", ...ipCall.rules]);
    const ipHit = hitFromReply(ipReply, usualWindow(layers));
    if (!ipHit.allowed && ip.shadow !== true) return { kind: "ip_denied", hit: ipHit } as const;
    const answer = await call(request, false);
    const refused = answer.kind !== "ok" || !answer.hit.allowed;
    // Only a request the IP layer counted is taken back from it.
    if (refused && ipHit.allowed && !request.dryRun) {
      // Fire and forget: a release that fails leaves one request counted, the safe side.
      hot.limitRelease(ipCall.keys, [String(answerNowUs(ipReply)), ...ipCall.rules]).catch(() => undefined);
    }
    if (answer.kind !== "ok") return answer;
    return { ...answer, hit: combine(ipHit, answer.hit) };
  };

  return {
    authorize(request) {
      if (split && request.ip !== undefined) return clustered(request, request.ip);
      return call(request, true);
    },
  };
}

/**
 * The user's answer with the IP layer as layer 0, described as one call would: a denial by the
 * user's layer, then a full (shadow) IP layer, or the window with least room left (ties to the user's).
 */
function combine(ip: HitResult, user: HitResult): HitResult {
  if (!user.allowed) return { ...user, layer: 1 };
  if (!ip.allowed || ip.remaining < user.remaining) return { ...ip, layer: 0 };
  return { ...user, layer: 1 };
}
