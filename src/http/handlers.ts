// What the public and admin APIs share: async handlers, body validation with the field named, bearer tokens.
import { createHash, timingSafeEqual } from "node:crypto";
import type { NextFunction, Request, RequestHandler, Response } from "express";
import { z } from "zod";
import { parseWholeNumber, wholeNumberRange } from "../config/numbers.js";
import { fieldPath } from "../config/problems.js";
import { bearerChallenge, HttpError, shown } from "./errors.js";
import { routeOf } from "./request-log.js";

/**
 * For an answer that carries a secret (a login's token, a new API key): no cache on the way may keep
 * it (no-store; Pragma for HTTP/1.0 caches, as RFC 6749 section 5.1 asks of a token's answer).
 */
export const noStore = (res: Response): Response =>
  res.set({ "Cache-Control": "no-store", Pragma: "no-cache" });

/**
 * An async handler whose failures reach the error handler, with the route they happened on
 * (`res.locals.route`), which a log line names instead of the path.
 */
export const handle =
  (fn: (req: Request, res: Response) => Promise<void>): RequestHandler =>
  (req, res, next: NextFunction) =>
    fn(req, res).catch((error: unknown) => {
      res.locals.route = routeOf(req);
      next(error);
    });

/**
 * The body (or query) as `schema` reads it, or 400 naming the field of the first problem. A client's
 * keys are repeated in the message only so far (a 16 kB key would make a 16 kB message).
 */
export function parse<T>(schema: z.ZodType<T>, body: unknown, key = "key"): T {
  const result = schema.safeParse(body);
  if (!result.success) {
    const issue = result.error.issues[0];
    const path = (issue?.path ?? []).map((p) => (typeof p === "string" ? shown(p) : p));
    const where = path.length > 0 ? `${fieldPath(path)}: ` : "";
    if (issue?.code === "unrecognized_keys") {
      const keys = issue.keys.map((k) => JSON.stringify(shown(k))).join(", ");
      throw new HttpError("bad_request", `${where}unknown ${key}${issue.keys.length > 1 ? "s" : ""} ${keys}`);
    }
    throw new HttpError("bad_request", `${where}${issue?.message ?? "invalid body"}`);
  }
  return result.data;
}

/**
 * The query as `schema` reads it. A parameter given twice (`?limit=1&limit=2`) is refused naming it:
 * which of the two a reader would take is a guess, and node's parser makes a list of them.
 */
export function parseQuery<T>(schema: z.ZodType<T>, query: Record<string, unknown>): T {
  for (const [name, value] of Object.entries(query)) {
    if (typeof value !== "string") {
      throw new HttpError("bad_request", `${shown(name)}: give this query parameter once`);
    }
  }
  return parse(schema, query, "query parameter");
}

/** A query parameter that is a whole number from `min` to `max` (config/numbers.ts), `fallback` when absent. */
export const wholeNumberParameter = (min: number, max: number, fallback: number) =>
  z
    .string()
    .optional()
    .transform((text, ctx): number => {
      if (text === undefined) return fallback;
      const value = parseWholeNumber(text, min, max);
      if (value !== undefined) return value;
      ctx.addIssue({ code: "custom", message: `expected ${wholeNumberRange(min, max)}` });
      return z.NEVER;
    });

export function bearerToken(header: string | undefined): string | undefined {
  if (header === undefined) return undefined;
  const match = /^Bearer[ ]+([^ ]+)[ ]*$/i.exec(header);
  return match?.[1];
}

const digest = (value: string): Buffer => createHash("sha256").update(value).digest();

/** Constant-time bearer check: both sides are hashed to one length before comparing. */
export function requireBearer(expected: string, realm: string): RequestHandler {
  const wanted = digest(expected);
  return (req, _res, next) => {
    const given = bearerToken(req.headers.authorization);
    if (given !== undefined && timingSafeEqual(digest(given), wanted)) return next();
    next(
      new HttpError("unauthorized", `A valid ${realm} bearer token is required`, {
        "WWW-Authenticate": bearerChallenge(given === undefined ? undefined : "wrong token"),
      }),
    );
  };
}
