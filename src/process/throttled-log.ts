// Logs that cannot flood: at most one line per key per second (or per period), carrying the count it suppressed.
import type { Logger } from "./logger.js";

type Slot = { period: number; suppressed: number };

export const MAX_SLOTS = 10_000;

export type ThrottledLogOptions = {
  logger: Logger;
  level: "info" | "warn";
  event: string;
  message: string;
  /** One line per key per this many milliseconds; 1000 when omitted. */
  periodMs?: number;
  clock?: () => number;
};

/** A line's fields, or a function that builds them only for a line that is written. */
export type LogFields = Record<string, unknown> | (() => Record<string, unknown>);

export type ThrottledLog = ((key: string, fields: LogFields) => void) & {
  /** How many keys are remembered now: never more than MAX_SLOTS. */
  size(): number;
  /** Whether LOG_LEVEL lets its lines through (read once: it does not change while tollgate runs). */
  enabled: boolean;
};

/** Returns log(key, fields): one line per key per period; memory bounded to MAX_SLOTS keys. */
export function createThrottledLog(options: ThrottledLogOptions): ThrottledLog {
  const { logger, level, event, message } = options;
  const clock = options.clock ?? Date.now;
  const periodMs = options.periodMs ?? 1000;
  const slots = new Map<string, Slot>();
  const enabled = logger.isLevelEnabled(level);
  const log = (key: string, fields: LogFields): void => {
    if (!enabled) return;
    const period = Math.floor(clock() / periodMs);
    const slot = slots.get(key);
    if (slot !== undefined && slot.period === period) {
      slot.suppressed += 1;
      return;
    }
    if (slot === undefined && slots.size >= MAX_SLOTS) {
      for (const [k, s] of slots) if (s.period < period) slots.delete(k);
      if (slots.size >= MAX_SLOTS) slots.clear();
    }
    const values = typeof fields === "function" ? fields() : fields;
    logger[level]({ event, ...values, suppressed: slot?.suppressed ?? 0 }, message);
    slots.set(key, { period, suppressed: 0 });
  };
  return Object.assign(log, { size: () => slots.size, enabled });
}
