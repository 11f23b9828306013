// What the limiter's script reads and answers, in TypeScript: rules as text, and the packed reply
// (lua/limit.lua) as the port's LimitResult.
import type { Algorithm, Rule, TierRules, Window } from "../../config/rules.js";
import type { LayerResult, LimitResult, WindowResult } from "../../ratelimit/limiter.js";
import { LUA_CONSTANTS as C } from "./protocol.js";

const CODE: Record<Algorithm, number> = {
  "sliding-log": C.ALGO_SLIDING_LOG,
  "sliding-counter": C.ALGO_SLIDING_COUNTER,
  gcra: C.ALGO_GCRA,
  "fixed-window": C.ALGO_FIXED_WINDOW,
};

/** "<limit>/<window µs>" per window, comma-separated: a user's own windows as the user hash holds them. */
export const windowsSpec = (windows: readonly Window[]): string =>
  windows.map((w) => `${w.limit}/${w.windowMs * 1000}`).join(",");

const texts = new WeakMap<Rule, string>();

/** A rule as the scripts read it (lua/includes/layer.lua): "<algorithm code>:" and its windows. */
export function ruleText(rule: Rule): string {
  let text = texts.get(rule);
  if (text === undefined) {
    text = `${CODE[rule.algorithm]}:${windowsSpec(rule.windows)}`;
    texts.set(rule, text);
  }
  return text;
}

const tables = new WeakMap<TierRules, Map<string, string>>();

/**
 * The user's layer in one argument (lua/includes/single.lua's tier_table): its record field
 * "r:<category>", then the category's rule for every tier, ";<tier>=<rule text>" per tier.
 */
export function tierTable(category: string, rules: TierRules): string {
  let ofRules = tables.get(rules);
  if (ofRules === undefined) {
    ofRules = new Map();
    tables.set(rules, ofRules);
  }
  let table = ofRules.get(category);
  if (table === undefined) {
    table = `r:${category}${[...rules].map(([tier, rule]) => `;${tier}=${ruleText(rule)}`).join("")}`;
    ofRules.set(category, table);
  }
  return table;
}

/** Parses windowsSpec's text back, counted with `algorithm`; undefined for anything malformed. */
export function parseWindowsSpec(text: string, algorithm: Algorithm): Rule | undefined {
  const windows: Window[] = [];
  for (const part of text.split(",")) {
    const match = /^(\d+)\/(\d+)$/.exec(part);
    if (match === null) return undefined;
    windows.push({ limit: Number(match[1]), windowMs: Number(match[2]) / 1000 });
  }
  return windows.length === 0 ? undefined : { algorithm, windows };
}

/** The reply's head: status, now µs, the session's expiry ms, the length of the text at the end. */
const HEAD_BYTES = 32;
const WINDOW_BYTES = 24;

/** The reply's status (LUA_CONSTANTS.STATUS_*). */
export const replyStatus = (reply: Buffer): number => reply.readDoubleLE(0);

/** The reply's now (µs of the store's clock): when the request was counted. */
export const replyNowUs = (reply: Buffer): number => reply.readDoubleLE(8);

/** The session's absolute expiry (ms; 0 without an identity). */
export const replySessionExpiresAtMs = (reply: Buffer): number => reply.readDoubleLE(16);

/** The reply's text: the tier and the user's own windows, or an unknown tier. */
export function replyText(reply: Buffer): string {
  const length = reply.readDoubleLE(24);
  return length === 0 ? "" : reply.toString("utf8", reply.length - length);
}

/**
 * The windows of the reply's layers: one per fixed layer (`fixed`, in order), then, when `last` is
 * given, the user's layer under that rule.
 */
export function replyLayers(
  reply: Buffer,
  fixed: readonly { rule: Rule }[],
  last: Rule | undefined,
): LayerResult[] {
  const nowUs = replyNowUs(reply);
  const layers: LayerResult[] = [];
  let at = HEAD_BYTES;
  const count = fixed.length + (last === undefined ? 0 : 1);
  for (let l = 0; l < count; l += 1) {
    const rule = l < fixed.length ? (fixed[l] as { rule: Rule }).rule : (last as Rule);
    const windows: WindowResult[] = [];
    let room = true;
    for (const w of rule.windows) {
      const used = reply.readDoubleLE(at);
      const retry = reply.readDoubleLE(at + 16);
      if (retry > 0) room = false;
      windows.push({
        limit: w.limit,
        windowMs: w.windowMs,
        used,
        remaining: Math.max(0, w.limit - used),
        resetAtMs: reply.readDoubleLE(at + 8) / 1000,
        retryAfterMs: retry > 0 ? Math.max(1, Math.ceil((retry - nowUs) / 1000)) : 0,
      });
      at += WINDOW_BYTES;
    }
    layers.push({ room, counted: false, windows });
  }
  return layers;
}

/** The status codes that end a reply without layers. */
export function refusalOf(status: number, reply: Buffer): LimitResult | undefined {
  if (status === C.STATUS_NO_SESSION) return { kind: "no_session" };
  if (status === C.STATUS_USER_INACTIVE) return { kind: "user_inactive" };
  if (status === C.STATUS_UNKNOWN_TIER) return { kind: "unknown_tier", tier: replyText(reply) };
  return undefined;
}

/** Own windows: fields o:<category> of a user's or a subject's hash (the check script reads them in the same call). */
export function ownLimits(fields: Record<string, string>): Record<string, readonly Window[]> {
  const limits: Record<string, readonly Window[]> = {};
  for (const [field, value] of Object.entries(fields)) {
    if (!field.startsWith("o:")) continue;
    const rule = parseWindowsSpec(value, "sliding-log");
    if (rule !== undefined) limits[field.slice(2)] = rule.windows;
  }
  return limits;
}
