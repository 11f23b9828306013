// The throttled log on a pinned clock: one line per key per second, suppressed counts, bounded memory.
import { describe, expect, it } from "vitest";
import { createLogger } from "../../src/process/logger.js";
import { createThrottledLog, MAX_SLOTS } from "../../src/process/throttled-log.js";

type Line = { level: string; event: string; msg: string; suppressed: number; [field: string]: unknown };

/** A throttled log whose pino logger writes into an array, with a clock the test moves by hand. */
function setup(level: "info" | "warn" = "info") {
  const lines: Line[] = [];
  const logger = createLogger("info", { write: (text: string) => void lines.push(JSON.parse(text)) });
  // A whole second, so that `now + ms` stays inside it for ms < 1000.
  const clock = { now: 1_700_000_000_000 };
  const log = createThrottledLog({
    logger,
    level,
    event: "rate_limited",
    message: "request denied: rate limit exceeded",
    clock: () => clock.now,
  });
  return { lines, clock, log };
}

describe("the throttled log", () => {
  it("writes one line per period when given one (a failed span export: one a minute)", () => {
    const lines: Line[] = [];
    const logger = createLogger("info", { write: (text: string) => void lines.push(JSON.parse(text)) });
    const clock = { now: 1_700_000_040_000 };
    const log = createThrottledLog({
      logger,
      level: "warn",
      event: "trace_export_failed",
      message: "spans could not be exported",
      periodMs: 60_000,
      clock: () => clock.now,
    });
    for (let i = 0; i < 12; i += 1) {
      log("export", { err: "ECONNREFUSED" });
      clock.now += 5_000;
    }
    expect(lines).toHaveLength(1);
    log("export", { err: "ECONNREFUSED" });
    expect(lines).toHaveLength(2);
    expect(lines[1]).toMatchObject({ event: "trace_export_failed", suppressed: 11 });
  });

  it("writes one line for 50 denials of one key within one second", () => {
    const { lines, clock, log } = setup();
    const start = clock.now;
    for (let i = 0; i < 50; i += 1) {
      clock.now = start + i * 19;
      log("user:u1|search", { subject: "user:u1", category: "search" });
    }
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({
      level: "info",
      event: "rate_limited",
      msg: "request denied: rate limit exceeded",
      subject: "user:u1",
      category: "search",
      suppressed: 0,
    });
  });

  it("builds lazily given fields only for the lines it writes", () => {
    const { lines, clock, log } = setup();
    const start = clock.now;
    let built = 0;
    const fields = () => {
      built += 1;
      return { subject: "ip:203.0.113.9", category: "general" };
    };
    for (let i = 0; i < 50; i += 1) {
      clock.now = start + i * 19;
      log("ip:203.0.113.9|general", fields);
    }
    clock.now = start + 1000;
    log("ip:203.0.113.9|general", fields);
    expect(built).toBe(2);
    expect(lines.map((l) => [l.subject, l.category, l.suppressed])).toEqual([
      ["ip:203.0.113.9", "general", 0],
      ["ip:203.0.113.9", "general", 49],
    ]);
  });

  it("reports the 49 suppressed lines on the first line of the next second", () => {
    const { lines, clock, log } = setup();
    const start = clock.now;
    for (let i = 0; i < 50; i += 1) {
      clock.now = start + i * 19;
      log("user:u1|search", { category: "search" });
    }
    clock.now = start + 1000;
    log("user:u1|search", { category: "search" });
    clock.now = start + 1500;
    log("user:u1|search", { category: "search" });
    expect(lines.map((l) => l.suppressed)).toEqual([0, 49]);
    // The one in the same second as the second line is counted for the line after it.
    clock.now = start + 2000;
    log("user:u1|search", { category: "search" });
    expect(lines.map((l) => l.suppressed)).toEqual([0, 49, 1]);
  });

  it("throttles each key on its own", () => {
    const { lines, clock, log } = setup("warn");
    const start = clock.now;
    for (let i = 0; i < 10; i += 1) {
      clock.now = start + i * 50;
      log("user:a|search", { subject: "user:a" });
      log("user:b|search", { subject: "user:b" });
      if (i < 3) log("user:a|orders", { subject: "user:a" });
    }
    expect(lines.map((l) => [l.subject, l.suppressed, l.level])).toEqual([
      ["user:a", 0, "warn"],
      ["user:b", 0, "warn"],
      ["user:a", 0, "warn"],
    ]);
    clock.now = start + 1000;
    log("user:b|search", { subject: "user:b" });
    log("user:a|orders", { subject: "user:a" });
    log("user:a|search", { subject: "user:a" });
    expect(lines.slice(3).map((l) => [l.subject, l.suppressed])).toEqual([
      ["user:b", 9],
      ["user:a", 2],
      ["user:a", 9],
    ]);
  });

  it("keeps at most MAX_SLOTS keys in memory when 20,000 keys arrive in one second", () => {
    const { lines, log } = setup();
    let largest = 0;
    for (let i = 0; i < 20_000; i += 1) {
      log(`ip:198.51.${i >> 8}.${i & 255}|general`, { subject: `ip:${i}` });
      largest = Math.max(largest, log.size());
    }
    expect(MAX_SLOTS).toBe(10_000);
    expect(largest).toBe(MAX_SLOTS);
    expect(log.size()).toBeLessThanOrEqual(MAX_SLOTS);
    // Every new key still gets its first line: forgetting costs a repeated line, never a lost one.
    expect(lines).toHaveLength(20_000);
  });

  it("forgets keys from earlier seconds first when 20,000 keys arrive over 20 seconds", () => {
    const { lines, clock, log } = setup();
    const start = clock.now;
    let largest = 0;
    for (let i = 0; i < 20_000; i += 1) {
      clock.now = start + Math.floor(i / 1000) * 1000;
      log(`user:u${i}|general`, {});
      largest = Math.max(largest, log.size());
    }
    expect(largest).toBe(MAX_SLOTS);
    expect(lines).toHaveLength(20_000);
    // The keys of the current second survived the eviction: a repeat is still suppressed.
    log("user:u19999|general", {});
    expect(lines).toHaveLength(20_000);
  });
});
