// Logs on stdout: JSON lines, or readable lines on a terminal; credentials are redacted wherever they might appear.
import { writeSync } from "node:fs";
import { pino } from "pino";
import type { LogFormat, LogLevel } from "../config/env.js";

export type Logger = pino.Logger;

const REDACT = {
  paths: [
    "password",
    "token",
    "access_token",
    "authorization",
    "apiKey",
    "secret",
    "cookie",
    '["x-api-key"]',
    "*.password",
    "*.token",
    "*.authorization",
    "*.apiKey",
    "*.secret",
    "*.cookie",
    '*["x-api-key"]',
    "*.*.password",
    "*.*.authorization",
  ],
  censor: "[redacted]",
};

export function createLogger(level: LogLevel, destination?: pino.DestinationStream): Logger {
  return pino(
    {
      level,
      // The pid tells the workers of one WORKERS=N tollgate apart (and their primary).
      base: { service: "tollgate", pid: process.pid },
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
      redact: REDACT,
    },
    destination,
  );
}

/** How long a write waits in total for a full pipe (EAGAIN) before the line is dropped. */
const FULL_PIPE_PATIENCE_MS = 1_000;
const pause = new Int32Array(new SharedArrayBuffer(4));

/**
 * Writes whole strings to a file descriptor, synchronously. Once the other end is gone (EPIPE) or any
 * other error occurs, every later write is dropped: a log line must never keep the process from
 * stopping, and pino's own destination retries a broken pipe forever when it flushes at exit.
 */
export function fdWriter(fd: number): { write(text: string): boolean; broken(): boolean } {
  let broken = false;
  return {
    write(text: string): boolean {
      if (broken) return true;
      let rest = Buffer.from(text, "utf8");
      let waited = 0;
      while (rest.length > 0) {
        try {
          rest = rest.subarray(writeSync(fd, rest));
        } catch (error) {
          const code = (error as NodeJS.ErrnoException).code;
          if ((code === "EAGAIN" || code === "EBUSY") && waited < FULL_PIPE_PATIENCE_MS) {
            Atomics.wait(pause, 0, 0, 5);
            waited += 5;
            continue;
          }
          if (code !== "EAGAIN" && code !== "EBUSY") broken = true;
          return true;
        }
      }
      return true;
    },
    broken: () => broken,
  };
}

/**
 * The process's logger: readable lines when stdout is a terminal and pino-pretty is installed (a
 * development dependency, absent from the production image), JSON lines otherwise.
 */
export async function createProcessLogger(options: {
  level: LogLevel;
  format: LogFormat;
  isTTY: boolean;
  fd?: number;
}): Promise<{ logger: Logger; format: "json" | "pretty" }> {
  const out = fdWriter(options.fd ?? 1);
  const wantPretty = options.format === "pretty" || (options.format === "auto" && options.isTTY);
  if (wantPretty) {
    const prettify = await loadPrettifier(options.isTTY);
    if (prettify !== undefined) {
      const logger = createLogger(options.level, {
        write: (line: string) => {
          out.write(prettify(line));
        },
      });
      return { logger, format: "pretty" };
    }
  }
  return {
    logger: createLogger(options.level, { write: (line: string) => out.write(line) }),
    format: "json",
  };
}

async function loadPrettifier(colorize: boolean): Promise<((line: string) => string) | undefined> {
  try {
    // Not a static import: the production image installs no development dependencies.
    const { prettyFactory } = (await import("pino-pretty")) as unknown as {
      prettyFactory(options: Record<string, unknown>): (line: string) => string;
    };
    return prettyFactory({
      colorize,
      singleLine: true,
      translateTime: "SYS:HH:MM:ss.l",
      ignore: "pid,hostname,service",
    });
  } catch {
    return undefined;
  }
}

/**
 * The generated admin token as a framed block for stderr: shown once, apart from the log lines on
 * stdout, so that it is neither missed nor collected by whatever gathers the JSON logs.
 */
export function adminTokenNotice(token: string): string {
  const lines = ["ADMIN_TOKEN is unset: this run's admin token (shown once):", `export ADMIN_TOKEN=${token}`];
  const width = Math.max(...lines.map((l) => l.length));
  const rule = "─".repeat(width + 2);
  const body = lines.map((l) => `│ ${l.padEnd(width)} │\n`).join("");
  return `\n┌${rule}┐\n${body}└${rule}┘\n\n`;
}

/** The first characters of a session id: enough to correlate, too few to use. */
export const sidPrefix = (sessionId: string): string => `${sessionId.slice(0, 6)}…`;
