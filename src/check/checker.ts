// Runs one check: token, plan, a cached refusal or the one limiter call, decision; store failures degrade.
// The one exception: an API key the store does not know is then counted as a bad credential, in a
// second call within the same REDIS_TIMEOUT_MS.
import type { CredentialReader } from "../auth/credentials.js";
import type { TokenCheck } from "../auth/jwt.js";
import type { FailureMode } from "../config/env.js";
import type { CompiledPolicy } from "../policy/compile.js";
import { type Caller, describe, type Limiter, type LimitResult } from "../ratelimit/limiter.js";
import { IP_LAYER } from "../ratelimit/types.js";
import { createDeadline, withDeadline as within } from "../store/failure.js";
import type { DeadSessions } from "./dead-sessions.js";
import { decideAnonymous, decideUser } from "./decide.js";
import type { DenialCache } from "./denial-cache.js";
import { plan, routeStep } from "./plan.js";
import { type Counted, limitRequest, userAnswer, withoutStore } from "./store-call.js";
import type { Decision, UserAnswer } from "./types.js";

export type CheckRequest = {
  method: string;
  path: string;
  authorization: string | undefined;
  /** The API key header's value (API_KEY_HEADER), read when no Authorization header is sent. */
  apiKey?: string | undefined;
  ip: string;
  /** The proxy's x-request-id: every log line of the check carries it. */
  requestId?: string | undefined;
  caller?: Caller | undefined; // a gRPC call, which may leave before its answer (see Caller)
};

export type CheckerOptions = {
  /** The policy in force, read once per check (a reload swaps it between checks). */
  policy(): CompiledPolicy;
  /** The request's credential: tollgate's token, the provider's, or an API key. */
  credentials: CredentialReader;
  /** EXTERNAL_DEFAULT_TIER. */
  externalDefaultTier?: string;
  limiter: Limiter;
  failureMode: FailureMode;
  /** REDIS_TIMEOUT_MS: the longest a check waits on the store before it degrades. */
  timeoutMs: number;
  idleMs: number;
  /** Refusals answered without the store until their window frees; none when undefined. */
  denials?: DenialCache;
  /** Sessions the store said are gone: their tokens count and fail as invalid ones. */
  deadSessions?: DeadSessions;
  /**
   * Users refused whatever the store says (the demo users, in production), even when degraded; an
   * API key created for one is refused too, by the store (only it knows the key's user), uncounted.
   */
  refusedUserIds?: ReadonlySet<string>;
  /** Called when the store failed and the check degraded; `operation` names the store call's kind. */
  onStoreError(operation: "authorize" | "hit", error: unknown, requestId: string | undefined): void;
  /** Called when a store call succeeded (so a recovery can be noticed). */
  onStoreOk(): void;
  /** Called when the denial cache answered a check: a refusal without a store call. */
  onCachedRefusal?(): void;
};

const DEAD_SESSION: TokenCheck = { ok: false, reason: "revoked", description: "session expired or revoked" };
const DISABLED: Decision = {
  kind: "deny",
  status: 401,
  reason: "inactive",
  description: "account disabled",
  tokenSent: true,
};
const DEAD_KEY: TokenCheck = { ok: false, reason: "revoked", description: "API key unknown or revoked" };
/** An API key's last use is written at most this often per key and process, in a check's own call. */
const LAST_USE_EVERY_MS = 60_000;
/** How long an API key the store refused is refused here without asking (ids are never reused). */
const DEAD_KEY_MS = 3_600_000;

/**
 * `dryRun`: the decision without counting, renewing or caching anything (the admin's check). A
 * decision that needs no store call (a route without limits, a bad token, a cached refusal) comes
 * back as it is, not in a promise: every proxied request waits on this, and a promise costs it an
 * async frame and a microtask turn.
 */
export type Checker = (request: CheckRequest, options?: { dryRun?: boolean }) => Decision | Promise<Decision>;

type Denial = Extract<Decision, { kind: "deny"; status: 429 }>;
const isDenial = (d: Decision): d is Denial => d.kind === "deny" && d.status === 429;
export function createChecker(options: CheckerOptions): Checker {
  const { credentials, limiter, failureMode, timeoutMs, idleMs, onStoreError, onStoreOk, refusedUserIds } =
    options;
  const withDeadline = createDeadline(timeoutMs);
  const refusedKeyUsers = refusedUserIds?.size === 0 ? undefined : refusedUserIds;
  /** Per API key id, when this process last had its use written: coalesced, never a write per check. */
  const lastUse = new Map<string, number>();
  const markUse = (subject: string, now: number): boolean => {
    const last = lastUse.get(subject);
    if (last !== undefined && now - last < LAST_USE_EVERY_MS) return false;
    if (lastUse.size >= 100_000) lastUse.clear();
    lastUse.set(subject, now);
    return true;
  };

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
    const own = denials.lookup(p.subject, p.category, p.cacheId, now);
    if (own?.user === undefined) return undefined;
    // The user's layer is the last: after the IP layer when the policy has one.
    own.hit.layer = p.ip === undefined ? 0 : 1;
    const { tier, ownRule, userId } = own.user;
    return decideUser(compiled, p, {
      kind: "ok",
      tier,
      hit: own.hit,
      ownRule,
      sessionExpiresAtMs: 0,
      userId,
    });
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
      // A cached refusal must not outlive the session (or the token), nor keep its idle lifetime from renewing.
      const sessionBound =
        p.proof === undefined ? Math.min(answer.sessionExpiresAtMs, at.now + idleMs / 2) : p.expiresAtMs;
      if (sessionBound <= at.now) return;
      const times = { retryAtMs, untilMs: Math.min(retryAtMs, sessionBound) };
      const refusal = {
        hit: answer.hit,
        user: { tier: answer.tier, ownRule: answer.ownRule, userId: answer.userId },
      };
      denials.remember(p.subject, p.category, windowMs, p.cacheId, refusal, times, at.generation);
    }
  };

  return (request, checkOptions) => {
    const dryRun = checkOptions?.dryRun === true;
    const compiled = options.policy();
    const step = routeStep(compiled, request.method, request.path);
    if ("done" in step) return step.done;
    const read = credentials(request.authorization, request.apiKey);
    // A provider token whose key set is being fetched is the only credential read that waits.
    return read instanceof Promise
      ? read.then((token) => withToken(request, dryRun, compiled, step, token))
      : withToken(request, dryRun, compiled, step, read);
  };

  function withToken(
    request: CheckRequest,
    dryRun: boolean,
    compiled: CompiledPolicy,
    step: Exclude<ReturnType<typeof routeStep>, { done: Decision }>,
    read: TokenCheck | undefined,
  ): Decision | Promise<Decision> {
    const denials = dryRun ? undefined : options.denials;
    let token = read;
    const now = Date.now();
    if (token?.ok === true && options.deadSessions !== undefined) {
      const { external, sid } = token.claims;
      if (external?.kind === "key") {
        if (options.deadSessions.has(external.hash, now)) token = DEAD_KEY;
      } else if (external === undefined && options.deadSessions.has(sid, now)) token = DEAD_SESSION;
    }
    const p = plan(
      compiled,
      {
        method: request.method,
        path: request.path,
        token,
        ip: request.ip,
        externalDefaultTier: options.externalDefaultTier,
      },
      step,
    );
    if (p.kind === "done") return p.decision;
    if (p.kind === "user" && p.proof === undefined && refusedUserIds?.has(p.userId) === true) return DISABLED;
    const generation = denials?.generation() ?? 0;
    if (denials !== undefined) {
      const answered = cached(compiled, p, denials, now);
      if (answered !== undefined) {
        options.onCachedRefusal?.();
        return answered;
      }
    }
    if (p.kind === "user" && p.proof?.kind === "key") {
      // Marked only for a check that reaches the store, which writes the use in the same call.
      if (!dryRun) p.proof.markUsed = markUse(p.subject, now);
      // A key acts for the user it names, which only the store knows: the store refuses a refused
      // user's key as a blocked one (401, never counted, never a cached refusal) in the same call.
      p.proof.refusedUsers = refusedKeyUsers;
    }
    return counted(request, dryRun, compiled, p, token, { now, generation });
  }

  async function counted(
    request: CheckRequest,
    dryRun: boolean,
    compiled: CompiledPolicy,
    p: Counted,
    token: TokenCheck | undefined,
    at: { now: number; generation: number },
  ): Promise<Decision> {
    const denials = dryRun ? undefined : options.denials;
    let result: LimitResult;
    const call = limitRequest(p, idleMs, dryRun, request.caller);
    try {
      result = await withDeadline(limiter.limit(call));
      onStoreOk();
    } catch (error) {
      onStoreError(p.kind === "user" ? "authorize" : "hit", error, request.requestId);
      return withoutStore(p, failureMode, call);
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
        if (p.proof?.kind === "key") {
          options.deadSessions?.add(p.proof.hash, at.now + DEAD_KEY_MS);
          // Its last use is written again by the next key that is valid under this id.
          lastUse.delete(p.subject);
        } else options.deadSessions?.add(p.sessionId, token.claims.exp * 1000);
      }
      if (answer.kind === "no_session" && p.proof?.kind === "key") {
        // Anyone can make up a well-formed key: counted against the address as any bad credential
        // is (the store counted nothing), or a flood of fresh ones would never meet the anonymous limit.
        // That takes a second store call (unless the denial cache answers), within what is left of
        // this check's REDIS_TIMEOUT_MS: past it, the key's 401 stands uncounted.
        const step = routeStep(compiled, request.method, request.path);
        if ("done" in step) return step.done;
        // From the check's start (`at.now`, read before the first call): no clock read of its own per check.
        const left = Math.min(timeoutMs, timeoutMs - (Date.now() - at.now));
        if (left <= 0) return decision;
        const again = withToken(request, dryRun, compiled, step, DEAD_KEY);
        return again instanceof Promise ? within(again, left).catch(() => decision) : again;
      }
    }
    if (denials !== undefined && isDenial(decision)) remember(p, answer, decision, denials, at);
    return decision;
  }
}
