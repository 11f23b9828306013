// The check's port to the store: one call that validates the session and counts the request.
import type { TierRules } from "../config/rules.js";
import type { HitResult, Rule, Subject } from "./types.js";

export type AuthorizeRequest = {
  userId: string;
  sessionId: string;
  category: string;
  rules: TierRules;
  /**
   * The per-address layer, counted with the user's (layer 0 of the answer's hit when present). In
   * `shadow` mode a full one refuses nothing (never `ip_denied`): the session and the user's layer
   * decide, the request counts in the user's layer, and the hit describes the full IP layer.
   */
  ip: { subject: Subject; rule: Rule; shadow?: boolean } | undefined;
  idleMs: number;
  /** Decide without counting or renewing anything. */
  dryRun: boolean;
};

export type AuthorizeResult =
  | { kind: "no_session" }
  | { kind: "user_inactive" }
  | { kind: "unknown_tier"; tier: string }
  /** The IP layer is full and enforced: refused before the session was looked at. */
  | { kind: "ip_denied"; hit: HitResult }
  | {
      kind: "ok";
      tier: string;
      /** Layer 0 is the IP layer when the request had one; the user's layer is the last. */
      hit: HitResult;
      /** The user's own rule for the category, when an admin set one. */
      ownRule: Rule | undefined;
      /** The session's absolute expiry (ms). */
      sessionExpiresAtMs: number;
    };

/** The check path's one store call for an authenticated request. */
export type AuthorizeStore = {
  authorize(request: AuthorizeRequest): Promise<AuthorizeResult>;
};
