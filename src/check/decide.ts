// The decision core: the plan and the store's answer in, a Decision out. No HTTP, no Redis.
import type { Identity } from "../auth/types.js";
import type { CompiledPolicy, NamedRule } from "../policy/compile.js";
import { ANONYMOUS_TIER } from "../policy/policy.js";
import type { HitResult } from "../ratelimit/types.js";
import type { Decision, DenyReason, LimitState, Plan, UserAnswer } from "./types.js";

/** One object shape for every limit state (no spreads on the check path). */
function limitState(hit: HitResult, tier: string, layers: readonly NamedRule[], shadow: boolean): LimitState {
  const described = layers[hit.layer] as NamedRule;
  return {
    allowed: hit.allowed,
    layer: hit.layer,
    window: hit.window,
    limit: hit.limit,
    windowMs: hit.windowMs,
    used: hit.used,
    remaining: hit.remaining,
    resetAtMs: hit.resetAtMs,
    retryAfterMs: hit.retryAfterMs,
    tier,
    category: described.category,
    described,
    layers,
    shadow,
  };
}

const allowAnonymous = (limit: LimitState | undefined): Decision => ({
  kind: "allow",
  identity: undefined,
  limit,
  degraded: false,
});

/** A full window: refused, or, when the layer that refused is in shadow mode, allowed and marked. */
function overLimit(limit: LimitState, identity: Identity | undefined): Decision {
  if (limit.described.mode === "shadow") {
    limit.shadow = true;
    return { kind: "allow", identity, limit, degraded: false };
  }
  return { kind: "deny", status: 429, limit, identity };
}

/** Step 2's outcome once the anonymous layers answered. */
export function decideAnonymous(p: Extract<Plan, { kind: "anonymous" }>, hit: HitResult): Decision {
  const limit = limitState(hit, ANONYMOUS_TIER, p.named, false);
  if (!hit.allowed) {
    const over = overLimit(limit, undefined);
    if (over.kind === "deny") return over;
  }
  if (!p.tokenRequired) return allowAnonymous(limit);
  if (p.token === undefined) {
    return {
      kind: "deny",
      status: 401,
      reason: "missing",
      description: "Authentication required",
      tokenSent: false,
    };
  }
  const reason: DenyReason = p.token.ok ? "invalid" : p.token.reason;
  const description = p.token.ok ? "invalid token" : p.token.description;
  return { kind: "deny", status: 401, reason, description, tokenSent: true };
}

/** Steps 3 and 4 once the store answered for a user. */
export function decideUser(
  compiled: CompiledPolicy,
  p: Extract<Plan, { kind: "user" }>,
  answer: UserAnswer,
): Decision {
  switch (answer.kind) {
    case "no_session":
      return {
        kind: "deny",
        status: 401,
        reason: "revoked",
        description: p.proof?.kind === "key" ? "API key unknown or revoked" : "session expired or revoked",
        tokenSent: true,
      };
    case "user_inactive":
      return {
        kind: "deny",
        status: 401,
        reason: "inactive",
        description: "account disabled",
        tokenSent: true,
      };
    case "unknown_tier":
      return {
        kind: "deny",
        status: 401,
        reason: "unknown_tier",
        description: "account tier is not configured",
        tokenSent: true,
        holder: { userId: p.userId, tier: answer.tier },
      };
    case "ip_denied": {
      // The address's refusal, made before the session was looked at: it names the requester's
      // tier as the token states it (its signature was checked), and no identity. A cached one is
      // decided here as well, for each requester, so it never names whoever filled the layer.
      // Never a pass, whatever the layer's mode now: nothing vouched for the session. (A shadow
      // layer never answers this: the store then checks the session and counts the user's layer.)
      const limit = limitState(answer.hit, p.claimTier, [compiled.ip as NamedRule], false);
      return { kind: "deny", status: 429, limit, identity: undefined };
    }
    case "ok": {
      const identity: Identity = {
        userId: answer.userId ?? p.userId,
        tier: answer.tier,
        sessionId: p.sessionId,
      };
      const mine = compiled.named(answer.tier, p.category, answer.ownRule);
      const layers = p.ip === undefined ? [mine] : [compiled.ip as NamedRule, mine];
      const limit = limitState(answer.hit, answer.tier, layers, false);
      if (!answer.hit.allowed) return overLimit(limit, identity);
      return { kind: "allow", identity, limit, degraded: false };
    }
  }
}

/**
 * The store is down or too slow: FAILURE_MODE decides for a valid token. A limited route that takes
 * no token (login) has the address's window as its only protection, which cannot be counted now:
 * 503 in either mode, or credential stuffing would be unlimited while Redis is slow (and a login
 * needs the store anyway).
 */
export function decideDegraded(p: Plan, failureMode: "open" | "closed"): Decision {
  if (failureMode === "closed") return { kind: "deny", status: 503 };
  if (p.kind === "anonymous" && !p.tokenRequired) return { kind: "deny", status: 503 };
  if (p.kind === "user") {
    // An API key is only known to the store: none passes unchecked.
    if (p.proof?.kind === "key") return { kind: "deny", status: 503 };
    const identity: Identity = { userId: p.userId, tier: p.claimTier, sessionId: p.sessionId };
    return { kind: "allow", identity, limit: undefined, degraded: true };
  }
  if (p.kind === "anonymous" && p.tokenRequired) {
    // The token is still judged: an invalid one gets 401 even without the store.
    const described = p.named[p.named.length - 1] as NamedRule;
    const window = described.rule.windows[0];
    const fake: HitResult = {
      allowed: true,
      layer: p.named.length - 1,
      window: 0,
      limit: window?.limit ?? 0,
      windowMs: window?.windowMs ?? 0,
      used: 0,
      remaining: window?.limit ?? 0,
      resetAtMs: 0,
      retryAfterMs: 0,
    };
    const decision = decideAnonymous(p, fake);
    if (decision.kind === "allow") return { ...decision, limit: undefined, degraded: true };
    return decision;
  }
  return { kind: "allow", identity: undefined, limit: undefined, degraded: true };
}
