// Rules as the Lua scripts read them, built once per rule, and the scripts' replies as HitResults.
import type { Algorithm, HitResult, Rule, Window, WindowState } from "../../ratelimit/types.js";

const LETTER: Record<Algorithm, string> = { "sliding-log": "L", "sliding-counter": "C", gcra: "G" };
const ALGORITHM_OF: Record<string, Algorithm> = { L: "sliding-log", C: "sliding-counter", G: "gcra" };

/** "<limit>/<window µs>" per window, comma-separated: a user's own windows as the user hash holds them. */
export const windowsSpec = (windows: readonly Window[]): string =>
  windows.map((w) => `${w.limit}/${w.windowMs * 1000}`).join(",");

const specs = new WeakMap<Rule, string>();

/** The algorithm's letter, then the windows (see lib/common.lua's parse_rule). */
export function ruleSpec(rule: Rule): string {
  let spec = specs.get(rule);
  if (spec === undefined) {
    spec = LETTER[rule.algorithm] + windowsSpec(rule.windows);
    specs.set(rule, spec);
  }
  return spec;
}

const tables = new WeakMap<ReadonlyMap<string, Rule>, string>();

/** A category's rule for every tier in one argument: ";<tier>=<rule>" repeated. */
export function tierTable(rules: ReadonlyMap<string, Rule>): string {
  let table = tables.get(rules);
  if (table === undefined) {
    table = [...rules].map(([tier, rule]) => `;${tier}=${ruleSpec(rule)}`).join("");
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

export const algorithmOfSpec = (spec: string): Algorithm => ALGORITHM_OF[spec.charAt(0)] ?? "sliding-log";

/** A reply's first ten fields (lib/common.lua's `answer`) as a HitResult; layer and window from 0. */
export function hitFromReply(reply: readonly (number | string)[]): HitResult {
  const [allowed, layer, window, limit, used, remaining, windowUs, resetUs, retryUs, nowUs] =
    reply as number[];
  const ok = allowed === 1;
  return {
    allowed: ok,
    layer: (layer as number) - 1,
    window: (window as number) - 1,
    limit: limit as number,
    windowMs: (windowUs as number) / 1000,
    used: used as number,
    remaining: remaining as number,
    resetAtMs: (resetUs as number) / 1000,
    retryAfterMs: ok ? 0 : Math.max(1, Math.ceil(((retryUs as number) - (nowUs as number)) / 1000)),
  };
}

/** limit.lua's per-window states after the answer (mode "2"). */
export function windowStatesFromReply(reply: readonly (number | string)[]): WindowState[] {
  const states: WindowState[] = [];
  for (let i = 10; i + 5 <= reply.length; i += 5) {
    const [limit, windowUs, used, remaining, resetUs] = reply.slice(i, i + 5) as number[];
    states.push({
      limit: limit as number,
      windowMs: (windowUs as number) / 1000,
      used: used as number,
      remaining: remaining as number,
      resetAtMs: (resetUs as number) / 1000,
    });
  }
  return states;
}
