// Structured JSON logs on stdout; credentials are redacted wherever they might appear.
import { pino } from "pino";
import type { LogLevel } from "./config/env.js";

export type Logger = pino.Logger;

export function createLogger(level: LogLevel, destination?: pino.DestinationStream): Logger {
  return pino(
    {
      level,
      // The pid tells the workers of one WORKERS=N tollgate apart (and their primary).
      base: { service: "tollgate", pid: process.pid },
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
      redact: {
        paths: [
          "password",
          "token",
          "access_token",
          "authorization",
          "*.password",
          "*.token",
          "*.authorization",
        ],
        censor: "[redacted]",
      },
    },
    destination,
  );
}

/** The first characters of a session id: enough to correlate, too few to use. */
export const sidPrefix = (sessionId: string): string => `${sessionId.slice(0, 6)}…`;
