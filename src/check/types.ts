// The check's vocabulary: the facts a front end hands in, the plan of what to ask the store, and the
// Decision a front end renders.
import type { TokenCheck } from "../auth/jwt.js";
import type { Proof } from "../auth/subjects.js";
import type { Identity } from "../auth/types.js";
import type { Rule, TierRules } from "../config/rules.js";
import type { NamedRule } from "../policy/compile.js";
import type { LimitLayer } from "../ratelimit/limiter.js";
import type { HitResult, Subject } from "../ratelimit/types.js";

/** The limit that applied: the described window's state after this request, and every layer's rule. */
export type LimitState = HitResult & {
  tier: string;
  /** The described layer's category: the route's, or `ip`. */
  category: string;
  described: NamedRule;
  /** Every layer the request was counted against (for RateLimit-Policy), in evaluation order. */
  layers: readonly NamedRule[];
  /** The window was full but the layer is in shadow mode: allowed, and marked. */
  shadow: boolean;
};

export type DenyReason = "missing" | "invalid" | "expired" | "revoked" | "inactive" | "unknown_tier";

export type Decision =
  | { kind: "allow"; identity: Identity | undefined; limit: LimitState | undefined; degraded: boolean }
  | {
      kind: "deny";
      status: 401;
      reason: DenyReason;
      description: string;
      tokenSent: boolean;
      /** For reason unknown_tier: whose stored tier the policy lacks (for the operator's log line). */
      holder?: { userId: string; tier: string };
    }
  | { kind: "deny"; status: 429; limit: LimitState; identity: Identity | undefined }
  | { kind: "deny"; status: 400; description: string }
  | { kind: "deny"; status: 503 };

export type Facts = {
  method: string;
  path: string;
  token: TokenCheck | undefined;
  ip: string;
  /** EXTERNAL_DEFAULT_TIER: a provider subject's tier when its token names none the policy knows. */
  externalDefaultTier?: string;
};

/** What the check must ask the store, if anything. */
export type Plan =
  | { kind: "done"; decision: Decision }
  | {
      kind: "anonymous";
      subject: string;
      category: string;
      /** The IP layer (when the policy has one), then the anonymous tier's rule for the category. */
      layers: readonly LimitLayer[];
      named: readonly NamedRule[];
      tokenRequired: boolean;
      token: TokenCheck | undefined;
    }
  | {
      kind: "user";
      userId: string;
      sessionId: string;
      claimTier: string;
      category: string;
      rules: TierRules;
      /** Whose windows and refusals: `u:<id>`, or a subject without a session (`k:<id>`, `x:<hash>`). */
      subject: Subject;
      /** What the store checks instead of a session, for a subject without one. */
      proof: Proof | undefined;
      /** The denial cache's session slot: the session id, an API key's hash, or "" (a provider token). */
      cacheId: string;
      /** The credential's own end (ms): a provider token's exp (a key's never comes); a session's is the store's. */
      expiresAtMs: number;
      /** The IP layer; `shadow`: over it only marks, the session and the user's layer decide. */
      ip: { subject: string; rule: Rule; shadow: boolean } | undefined;
    };

/** What the limiter answered for a user's request, as the decision reads it. */
export type UserAnswer =
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
      /** The user a profile names (an API key's user), when it names one. */
      userId?: string | undefined;
    };
