// Rules as the Lua scripts read them, built once per rule, and the scripts' replies as HitResults.
import type { Algorithm, HitResult, Rule, Window, WindowState } from "../../ratelimit/types.js";

const CODE: Record<Algorithm, number> = { "sliding-log": 1, "sliding-counter": 2, gcra: 3 };

/** "<limit>/<window µs>" per window, comma-separated: a user's own windows as the user hash holds them. */
export const windowsSpec = (windows: readonly Window[]): string =>
  windows.map((w) => `${w.limit}/${w.windowMs * 1000}`).join(",");

const specs = new WeakMap<Rule, string>();
const hex = (n: number, width: number): string => n.toString(16).padStart(width, "0");

/**
 * A rule packed for the scripts, as text of fixed widths (lib/common.lua's rule_of_tier): the
 * algorithm and the window count (a digit each), then per window the limit (6 hex digits) and the
 * length in µs (10). Text, because ioredis writes binary arguments slower than strings.
 */
export function ruleSpec(rule: Rule): string {
  let spec = specs.get(rule);
  if (spec === undefined) {
    spec =
      `${CODE[rule.algorithm]}${rule.windows.length}` +
      rule.windows.map((w) => hex(w.limit, 6) + hex(w.windowMs * 1000, 10)).join("");
    specs.set(rule, spec);
  }
  return spec;
}

const tables = new WeakMap<ReadonlyMap<string, Rule>, string>();

/**
 * A category's rule for every tier in one argument: ";<tier>=<4 hex digits>" per tier (the digits
 * the 1-based position of its rule), "|", then the packed rules.
 */
export function tierTable(rules: ReadonlyMap<string, Rule>): string {
  let table = tables.get(rules);
  if (table === undefined) {
    const entries = [...rules];
    const headerLength = entries.reduce((sum, [tier]) => sum + tier.length + 6, 0);
    let at = headerLength + 2;
    const header: string[] = [];
    const packed: string[] = [];
    for (const [tier, rule] of entries) {
      const spec = ruleSpec(rule);
      header.push(`;${tier}=${hex(at, 4)}`);
      packed.push(spec);
      at += spec.length;
    }
    if (at > 0xffff) throw new Error("a category's rules are too large to pack");
    table = `${header.join("")}|${packed.join("")}`;
    tables.set(rules, table);
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

/** The answer's size: ten doubles (lib/common.lua's `pack_answer`). */
export const ANSWER_BYTES = 80;
/** The usual answer's size: five doubles (lib/common.lua's `pack_usual`, a rule of one window). */
export const USUAL_ANSWER_BYTES = 40;

/** Whether a reply starts with the usual answer (its first double 3 | 2) rather than a full one (1 | 0). */
export const isUsualAnswer = (reply: Buffer): boolean => reply.readDoubleLE(0) >= 2;

/** The answer's "now" (µs of the store's clock): when the request was counted. */
export const answerNowUs = (reply: Buffer): number => reply.readDoubleLE(isUsualAnswer(reply) ? 32 : 72);

/**
 * An answer as a HitResult; layer and window counted from 0. A usual answer carries only what the
 * caller knows not: `usual` is the one window of the one layer it sent, whose numbers complete it.
 */
export function hitFromReply(reply: Buffer, usual: Window | undefined): HitResult {
  const at = (i: number) => reply.readDoubleLE(8 * i);
  const first = at(0);
  if (first >= 2) {
    if (usual === undefined) throw new Error("a one-window answer to a call of several windows");
    const ok = first === 3;
    const used = at(1);
    return {
      allowed: ok,
      layer: 0,
      window: 0,
      limit: usual.limit,
      windowMs: usual.windowMs,
      used,
      remaining: Math.max(0, usual.limit - used),
      resetAtMs: at(2) / 1000,
      retryAfterMs: ok ? 0 : Math.max(1, Math.ceil((at(3) - at(4)) / 1000)),
    };
  }
  const ok = first === 1;
  return {
    allowed: ok,
    layer: at(1) - 1,
    window: at(2) - 1,
    limit: at(3),
    windowMs: at(6) / 1000,
    used: at(4),
    remaining: at(5),
    resetAtMs: at(7) / 1000,
    retryAfterMs: ok ? 0 : Math.max(1, Math.ceil((at(8) - at(9)) / 1000)),
  };
}

/** The one window of a call of one layer, whose answer is the usual one; otherwise undefined. */
export function usualWindow(layers: readonly { rule: Rule }[]): Window | undefined {
  if (layers.length !== 1) return undefined;
  const windows = (layers[0] as { rule: Rule }).rule.windows;
  return windows.length === 1 ? windows[0] : undefined;
}

/** limit.lua's per-window states after the answer (mode "2"): five doubles each. */
export function windowStatesFromReply(reply: Buffer): WindowState[] {
  const states: WindowState[] = [];
  for (let i = ANSWER_BYTES; i + 40 <= reply.length; i += 40) {
    states.push({
      limit: reply.readDoubleLE(i),
      windowMs: reply.readDoubleLE(i + 8) / 1000,
      used: reply.readDoubleLE(i + 16),
      remaining: reply.readDoubleLE(i + 24),
      resetAtMs: reply.readDoubleLE(i + 32) / 1000,
    });
  }
  return states;
}
