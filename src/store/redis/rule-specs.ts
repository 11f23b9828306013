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

/** The answer's size: ten doubles (lib/common.lua's `answer`). */
export const ANSWER_BYTES = 80;

/** An answer (ten little-endian doubles) as a HitResult; layer and window counted from 0. */
export function hitFromReply(reply: Buffer, offset = 0): HitResult {
  const at = (i: number) => reply.readDoubleLE(offset + 8 * i);
  const ok = at(0) === 1;
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
