// Subjects, window states and results: what the limiter port (limiter.ts) speaks of. Rules are the policy's (config/rules.ts).

export {
  ALGORITHMS,
  type Algorithm,
  IP_LAYER,
  type Layer,
  type Rule,
  type Window,
} from "../config/rules.js";

import { createHash } from "node:crypto";
import { canonicalUsername } from "../auth/usernames.js";
import type { Rule } from "../config/rules.js";

/**
 * A subject's hash-tag content: `u:<user id>` for a user, `ip:<address>` for a client address,
 * `n:<hex>` for a username's failed logins (its canonical form: "Alice" and "alice" share one lockout). Every key of one subject carries it, so one script can
 * touch them all on Redis Cluster.
 */
export type Subject = string;

export const userSubject = (userId: string): Subject => `u:${userId}`;
/** Whether a subject is a user's (whose record is the user hash, which never expires). */
export const isUserSubject = (subject: Subject): boolean => subject.startsWith("u:");
export const ipSubject = (address: string): Subject => `ip:${address}`;
/**
 * A provider subject's hash-tag content: `x:` and the SHA-256 of its `sub` (base64url), so that
 * any `sub` a provider issues (`auth0|…`, an e-mail address, 255 bytes) is a short key without
 * braces, and one subject is one slot on Redis Cluster.
 */
export const externalSubject = (sub: string): Subject =>
  `x:${createHash("sha256").update(sub, "utf8").digest("base64url")}`;

/** What a provider subject's x-user-id (its user id) starts with, before its `sub`. */
export const PROVIDER_PREFIX = "ext:";
export const usernameSubject = (username: string): Subject =>
  `n:${Buffer.from(canonicalUsername(username), "utf8").toString("hex")}`;

/** One window's state, as an admin sees it. */
export type WindowState = {
  limit: number;
  windowMs: number;
  used: number;
  remaining: number;
  /** Unix ms when Remaining next grows (now, when nothing is counted). */
  resetAtMs: number;
};

export type HitResult = {
  /** Whether every window of every layer had room (a full shadow layer makes it false, see `hit`). */
  allowed: boolean;
  /**
   * Which layer (index into the request's layers) and window (index into its rule) the numbers
   * describe: on a denial the refusing window that frees last (an enforced layer's before a shadow
   * one's), otherwise the one with least room.
   */
  layer: number;
  window: number;
  limit: number;
  windowMs: number;
  /** Requests counted in that window, this one included when it was allowed. */
  used: number;
  remaining: number;
  /** Unix ms when Remaining next grows. */
  resetAtMs: number;
  /** 0 when allowed; otherwise ms until this request would be allowed (≥ 1). */
  retryAfterMs: number;
};

export type Clock = () => number;

/** A rule of one sliding-log window: what the login lockout and simple callers use. */
export const logRule = (limit: number, windowMs: number): Rule => ({
  algorithm: "sliding-log",
  windows: [{ limit, windowMs }],
});
