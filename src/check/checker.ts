// Runs one check: token, plan, a cached refusal or the one store call, decision; store failures degrade.
import type { TokenCheck, TokenService } from "../auth/jwt.js";
import type { FailureMode } from "../config/env.js";
import type { CompiledPolicy } from "../policy/compile.js";
import type { AuthorizeResult, AuthorizeStore } from "../ratelimit/authorize-port.js";
import {
  type HitResult,
  IP_LAYER,
  type Layer,
  type RateLimitStore,
  userSubject,
} from "../ratelimit/types.js";
import { createDeadline } from "../store/failure.js";
import type { DeadSessions } from "./dead-sessions.js";
import { decideAnonymous, decideDegraded, decideUser } from "./decide.js";
import type { DenialCache } from "./denial-cache.js";
import { plan } from "./plan.js";
import type { Decision } from "./types.js";

export type CheckRequest = { method: string; path: string; authorization: string | undefined; ip: string };

export type CheckerOptions = {
  /** The policy in force, read once per check (a reload swaps it between checks). */
  policy(): CompiledPolicy;
  tokens: TokenService;
  authorizer: AuthorizeStore;
  limiter: RateLimitStore;
  failureMode: FailureMode;
  /** REDIS_TIMEOUT_MS: the longest a check waits on the store before it degrades. */
  timeoutMs: number;
  idleMs: number;
  /** Refusals answered without the store until their window frees; none when undefined. */
  denials?: DenialCache;
  /** Sessions the store said are gone: their tokens count and fail as invalid ones. */
  deadSessions?: DeadSessions;
  /** Users refused whatever the store says (the demo users, in production), even when degraded. */
  refusedUserIds?: ReadonlySet<string>;
  /** Called when the store failed and the check degraded; `operation` names the store call. */
  onStoreError(operation: "authorize" | "hit", error: unknown): void;
  /** Called when a store call succeeded (so a recovery can be noticed). */
  onStoreOk(): void;
};

const NOT_BEARER: TokenCheck = { ok: false, reason: "invalid", description: "expected a Bearer token" };
const DEAD_SESSION: TokenCheck = { ok: false, reason: "revoked", description: "session expired or revoked" };

export function readToken(authorization: string | undefined, tokens: TokenService): TokenCheck | undefined {
  if (authorization === undefined || authorization === "") return undefined;
  // "Bearer <token>", scheme case-insensitive, as RFC 6750 allows.
  if (authorization.length < 8 || authorization.slice(0, 7).toLowerCase() !== "bearer ") return NOT_BEARER;
  return tokens.verify(authorization.slice(7).trim());
}

/** `dryRun`: the decision without counting, renewing or caching anything (the admin's check). */
export type Checker = (request: CheckRequest, options?: { dryRun?: boolean }) => Promise<Decision>;

type Denial = Extract<Decision, { kind: "deny"; status: 429 }>;
const isDenial = (d: Decision): d is Denial => d.kind === "deny" && d.status === 429;

export function createChecker(options: CheckerOptions): Checker {
  const { tokens, authorizer, limiter, failureMode, timeoutMs, idleMs, onStoreError, onStoreOk } = options;
  const { refusedUserIds } = options;
  const withDeadline = createDeadline(timeoutMs);

  return async (request, checkOptions) => {
    const dryRun = checkOptions?.dryRun === true;
    const denials = dryRun ? undefined : options.denials;
    const compiled = options.policy();
    let token = readToken(request.authorization, tokens);
    const now = Date.now();
    if (token?.ok === true && options.deadSessions?.has(token.claims.sid, now) === true) token = DEAD_SESSION;
    const p = plan(compiled, { method: request.method, path: request.path, token, ip: request.ip });
    if (p.kind === "done") return p.decision;
    if (p.kind === "user" && refusedUserIds?.has(p.userId) === true) {
      return {
        kind: "deny",
        status: 401,
        reason: "inactive",
        description: "account disabled",
        tokenSent: true,
      };
    }
    const generation = denials?.generation() ?? 0;

    // A cached refusal is the store's description of a full window: each request decides from it as
    // from the store's answer, with its own layers and tier (an address's refusal is everyone's there).
    if (p.kind === "anonymous") {
      if (denials !== undefined) {
        for (let layer = 0; layer < p.layers.length; layer += 1) {
          const { category, shadow } = p.layers[layer] as Layer;
          // A shadow layer refuses nothing (a refusal cached under enforce mode, before a reload, included):
          // the store counts the request in the enforced layers.
          if (shadow === true) continue;
          const cached = denials.lookup(p.subject, category, undefined, now);
          if (cached !== undefined) {
            cached.hit.layer = layer;
            return decideAnonymous(p, cached.hit);
          }
        }
      }
      let decision: Decision;
      let hit: HitResult;
      try {
        hit = await withDeadline(limiter.hit(p.subject, p.layers, { dryRun }));
        onStoreOk();
        decision = decideAnonymous(p, hit);
      } catch (error) {
        onStoreError("hit", error);
        return decideDegraded(p, failureMode);
      }
      if (denials !== undefined && isDenial(decision)) {
        const retryAtMs = now + decision.limit.retryAfterMs;
        const times = { retryAtMs, untilMs: retryAtMs };
        const refusal = { hit, user: undefined };
        denials.remember(p.subject, decision.limit.category, undefined, refusal, times, generation);
      }
      return decision;
    }

    const subject = userSubject(p.userId);
    if (denials !== undefined) {
      // Only an enforced IP layer refuses before the session is checked; in shadow mode the store
      // must check it (and count the user's layer) whatever refusal was cached before a reload.
      const address =
        p.ip === undefined || p.ip.shadow
          ? undefined
          : denials.lookup(p.ip.subject, IP_LAYER, undefined, now);
      if (address !== undefined) {
        address.hit.layer = 0;
        return decideUser(compiled, p, { kind: "ip_denied", hit: address.hit });
      }
      const own = denials.lookup(subject, p.category, p.sessionId, now);
      if (own?.user !== undefined) {
        // The user's layer is the last: after the IP layer when the policy has one.
        own.hit.layer = p.ip === undefined ? 0 : 1;
        const { tier, ownRule } = own.user;
        return decideUser(compiled, p, { kind: "ok", tier, hit: own.hit, ownRule, sessionExpiresAtMs: 0 });
      }
    }
    let decision: Decision;
    let answer: AuthorizeResult;
    let sessionBound = Number.POSITIVE_INFINITY;
    try {
      answer = await withDeadline(
        authorizer.authorize({
          userId: p.userId,
          sessionId: p.sessionId,
          category: p.category,
          rules: p.rules,
          ip: p.ip,
          idleMs,
          dryRun,
        }),
      );
      onStoreOk();
      decision = decideUser(compiled, p, answer);
      // Only a session that is gone: a disabled user's may serve again once the user is enabled.
      if (!dryRun && token?.ok === true && answer.kind === "no_session") {
        options.deadSessions?.add(p.sessionId, token.claims.exp * 1000);
      }
      // A cached refusal must not outlive the session, nor keep its idle lifetime from renewing.
      if (answer.kind === "ok") sessionBound = Math.min(answer.sessionExpiresAtMs, now + idleMs / 2);
    } catch (error) {
      onStoreError("authorize", error);
      return decideDegraded(p, failureMode);
    }
    if (denials !== undefined && isDenial(decision)) {
      const retryAtMs = now + decision.limit.retryAfterMs;
      if (answer.kind === "ip_denied" && p.ip !== undefined) {
        // The address's: whoever comes from it next is refused too, under their own name.
        const refusal = { hit: answer.hit, user: undefined };
        denials.remember(
          p.ip.subject,
          IP_LAYER,
          undefined,
          refusal,
          { retryAtMs, untilMs: retryAtMs },
          generation,
        );
      } else if (answer.kind === "ok" && sessionBound > now) {
        const times = { retryAtMs, untilMs: Math.min(retryAtMs, sessionBound) };
        const refusal = { hit: answer.hit, user: { tier: answer.tier, ownRule: answer.ownRule } };
        denials.remember(subject, p.category, p.sessionId, refusal, times, generation);
      }
    }
    return decision;
  };
}
