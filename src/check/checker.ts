// Runs one check: token, plan, a cached refusal or the one limiter call, decision; store failures degrade.
import type { TokenCheck, TokenService } from "../auth/jwt.js";
import type { FailureMode } from "../config/env.js";
import type { CompiledPolicy } from "../policy/compile.js";
import {
  describe,
  type Limiter,
  type LimitLayer,
  type LimitRequest,
  type LimitResult,
} from "../ratelimit/limiter.js";
import { IP_LAYER, userSubject } from "../ratelimit/types.js";
import { createDeadline } from "../store/failure.js";
import type { DeadSessions } from "./dead-sessions.js";
import { decideAnonymous, decideDegraded, decideUser } from "./decide.js";
import type { DenialCache } from "./denial-cache.js";
import { plan } from "./plan.js";
import type { Decision, Plan, UserAnswer } from "./types.js";

export type CheckRequest = {
  method: string;
  path: string;
  authorization: string | undefined;
  ip: string;
  /** The proxy's x-request-id: every log line of the check carries it. */
  requestId?: string | undefined;
};

export type CheckerOptions = {
  /** The policy in force, read once per check (a reload swaps it between checks). */
  policy(): CompiledPolicy;
  tokens: TokenService;
  limiter: Limiter;
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
  /** Called when the store failed and the check degraded; `operation` names the store call's kind. */
  onStoreError(operation: "authorize" | "hit", error: unknown, requestId: string | undefined): void;
  /** Called when a store call succeeded (so a recovery can be noticed). */
  onStoreOk(): void;
};

const NOT_BEARER: TokenCheck = { ok: false, reason: "invalid", description: "expected a Bearer token" };
const DEAD_SESSION: TokenCheck = { ok: false, reason: "revoked", description: "session expired or revoked" };
const DISABLED: Decision = {
  kind: "deny",
  status: 401,
  reason: "inactive",
  description: "account disabled",
  tokenSent: true,
};

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
type Counted = Exclude<Plan, { kind: "done" }>;
const NO_LAYERS: readonly LimitLayer[] = [];

/** The limiter's call for a plan: the anonymous layers, or the IP layer and the user's. */
function limitRequest(p: Counted, idleMs: number, dryRun: boolean): LimitRequest {
  if (p.kind === "anonymous") return { layers: p.layers, dryRun };
  const { ip } = p;
  return {
    layers:
      ip === undefined
        ? NO_LAYERS
        : [{ subject: ip.subject, category: IP_LAYER, rule: ip.rule, shadow: ip.shadow }],
    identity: { userId: p.userId, sessionId: p.sessionId, idleMs, category: p.category, rules: p.rules },
    dryRun,
  };
}

/**
 * The limiter's answer for a user as the decision reads it (one described window); `ipShadow`:
 * the request's layer 0 is an IP layer in shadow mode.
 */
export function userAnswer(result: LimitResult, ipShadow: boolean): UserAnswer {
  if (result.kind !== "limited") return result;
  const shadow = (layer: number) => layer === 0 && ipShadow;
  const hit = describe(result.layers, result.allowed, shadow);
  const { identity } = result;
  if (identity === undefined) return { kind: "ip_denied", hit };
  const { tier, ownRule, sessionExpiresAtMs } = identity;
  return { kind: "ok", tier, hit, ownRule, sessionExpiresAtMs };
}

export function createChecker(options: CheckerOptions): Checker {
  const { tokens, limiter, failureMode, timeoutMs, idleMs, onStoreError, onStoreOk, refusedUserIds } =
    options;
  const withDeadline = createDeadline(timeoutMs);

  /** A cached refusal is the store's description of a full window: each request decides from it as from the store's answer. */
  const cached = (
    compiled: CompiledPolicy,
    p: Counted,
    denials: DenialCache,
    now: number,
  ): Decision | undefined => {
    if (p.kind === "anonymous") {
      for (let layer = 0; layer < p.layers.length; layer += 1) {
        const { category, shadow } = p.layers[layer] as (typeof p.layers)[number];
        // A shadow layer refuses nothing (a refusal cached under enforce mode, before a reload, included).
        if (shadow === true) continue;
        const refusal = denials.lookup(p.subject, category, undefined, now);
        if (refusal !== undefined) {
          refusal.hit.layer = layer;
          return decideAnonymous(p, refusal.hit);
        }
      }
      return undefined;
    }
    // Only an enforced IP layer refuses before the session is checked (an address's refusal is everyone's there).
    const address =
      p.ip === undefined || p.ip.shadow ? undefined : denials.lookup(p.ip.subject, IP_LAYER, undefined, now);
    if (address !== undefined) {
      address.hit.layer = 0;
      return decideUser(compiled, p, { kind: "ip_denied", hit: address.hit });
    }
    const own = denials.lookup(userSubject(p.userId), p.category, p.sessionId, now);
    if (own?.user === undefined) return undefined;
    // The user's layer is the last: after the IP layer when the policy has one.
    own.hit.layer = p.ip === undefined ? 0 : 1;
    const { tier, ownRule } = own.user;
    return decideUser(compiled, p, { kind: "ok", tier, hit: own.hit, ownRule, sessionExpiresAtMs: 0 });
  };

  /** Remembers a refusal: an address's for whoever comes from it next, a user's until its session could change. */
  const remember = (
    p: Counted,
    answer: UserAnswer | undefined,
    decision: Denial,
    denials: DenialCache,
    at: { now: number; generation: number },
  ) => {
    const retryAtMs = at.now + decision.limit.retryAfterMs;
    const { windowMs } = decision.limit;
    if (p.kind === "anonymous") {
      const refusal = { hit: decision.limit, user: undefined };
      denials.remember(
        p.subject,
        decision.limit.category,
        windowMs,
        undefined,
        refusal,
        { retryAtMs, untilMs: retryAtMs },
        at.generation,
      );
    } else if (answer?.kind === "ip_denied" && p.ip !== undefined) {
      const refusal = { hit: answer.hit, user: undefined };
      denials.remember(
        p.ip.subject,
        IP_LAYER,
        windowMs,
        undefined,
        refusal,
        { retryAtMs, untilMs: retryAtMs },
        at.generation,
      );
    } else if (answer?.kind === "ok") {
      // A cached refusal must not outlive the session, nor keep its idle lifetime from renewing.
      const sessionBound = Math.min(answer.sessionExpiresAtMs, at.now + idleMs / 2);
      if (sessionBound <= at.now) return;
      const times = { retryAtMs, untilMs: Math.min(retryAtMs, sessionBound) };
      const refusal = { hit: answer.hit, user: { tier: answer.tier, ownRule: answer.ownRule } };
      denials.remember(
        userSubject(p.userId),
        p.category,
        windowMs,
        p.sessionId,
        refusal,
        times,
        at.generation,
      );
    }
  };

  return async (request, checkOptions) => {
    const dryRun = checkOptions?.dryRun === true;
    const denials = dryRun ? undefined : options.denials;
    const compiled = options.policy();
    let token = readToken(request.authorization, tokens);
    const now = Date.now();
    if (token?.ok === true && options.deadSessions?.has(token.claims.sid, now) === true) token = DEAD_SESSION;
    const p = plan(compiled, { method: request.method, path: request.path, token, ip: request.ip });
    if (p.kind === "done") return p.decision;
    if (p.kind === "user" && refusedUserIds?.has(p.userId) === true) return DISABLED;
    const generation = denials?.generation() ?? 0;
    if (denials !== undefined) {
      const answered = cached(compiled, p, denials, now);
      if (answered !== undefined) return answered;
    }
    let result: LimitResult;
    try {
      result = await withDeadline(limiter.limit(limitRequest(p, idleMs, dryRun)));
      onStoreOk();
    } catch (error) {
      onStoreError(p.kind === "user" ? "authorize" : "hit", error, request.requestId);
      return decideDegraded(p, failureMode);
    }
    let decision: Decision;
    let answer: UserAnswer | undefined;
    if (p.kind === "anonymous") {
      if (result.kind !== "limited")
        throw new Error(`the limiter answered ${result.kind} without an identity`);
      decision = decideAnonymous(
        p,
        describe(result.layers, result.allowed, (l) => p.layers[l]?.shadow === true),
      );
    } else {
      answer = userAnswer(result, p.ip?.shadow === true);
      decision = decideUser(compiled, p, answer);
      // Only a session that is gone: a disabled user's may serve again once the user is enabled.
      if (!dryRun && token?.ok === true && answer.kind === "no_session") {
        options.deadSessions?.add(p.sessionId, token.claims.exp * 1000);
      }
    }
    if (denials !== undefined && isDenial(decision))
      remember(p, answer, decision, denials, { now, generation });
    return decision;
  };
}
