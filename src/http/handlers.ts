// What the public and admin APIs share: async handlers, body validation with the field named, bearer tokens.
import { createHash, timingSafeEqual } from "node:crypto";
import type { NextFunction, Request, RequestHandler, Response } from "express";
import type { z } from "zod";
import { fieldPath } from "../config/problems.js";
import { bearerChallenge, HttpError } from "./errors.js";

/**
 * For an answer that carries a secret (a login's token, a new API key): no cache on the way may keep
 * it (no-store; Pragma for HTTP/1.0 caches, as RFC 6749 section 5.1 asks of a token's answer).
 */
export const noStore = (res: Response): Response =>
  res.set({ "Cache-Control": "no-store", Pragma: "no-cache" });

/** An async handler whose failures reach the error handler. */
export const handle =
  (fn: (req: Request, res: Response) => Promise<void>): RequestHandler =>
  (req, res, next: NextFunction) =>
    fn(req, res).catch(next);

/** The body (or query) as `schema` reads it, or 400 naming the field of the first problem. */
export function parse<T>(schema: z.ZodType<T>, body: unknown): T {
  const result = schema.safeParse(body);
  if (!result.success) {
    const issue = result.error.issues[0];
    const where = issue?.path.length ? `${fieldPath(issue.path)}: ` : "";
    throw new HttpError("bad_request", `${where}${issue?.message ?? "invalid body"}`);
  }
  return result.data;
}

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
