// A check's one store call (two for an API key the store does not know) as the limiter takes it,
// and the limiter's answer as the decision reads it.
import type { FailureMode } from "../config/env.js";
import {
  type Caller,
  describe,
  heldBy,
  type LimitLayer,
  type LimitRequest,
  type LimitResult,
  Withdrawal,
} from "../ratelimit/limiter.js";
import { IP_LAYER } from "../ratelimit/types.js";
import { decideDegraded } from "./decide.js";
import type { Decision, Plan, UserAnswer } from "./types.js";

/** A plan that reaches the store (or the denial cache). */
export type Counted = Exclude<Plan, { kind: "done" }>;
const NO_LAYERS: readonly LimitLayer[] = [];

/**
 * The limiter's call for a plan: the anonymous layers, or the IP layer and the user's; with a
 * withdrawal unless it is a dry run (which counts nothing), for withoutStore to set, and kept by the
 * caller when it may leave before its answer (a gRPC call's deadline or reset).
 */
export function limitRequest(p: Counted, idleMs: number, dryRun: boolean, caller?: Caller): LimitRequest {
  const withdrawal = dryRun ? undefined : heldBy(caller, new Withdrawal());
  if (p.kind === "anonymous") return { layers: p.layers, dryRun, withdrawal };
  const { ip } = p;
  return {
    layers:
      ip === undefined
        ? NO_LAYERS
        : [{ subject: ip.subject, category: IP_LAYER, rule: ip.rule, shadow: ip.shadow }],
    identity:
      p.proof === undefined
        ? { userId: p.userId, sessionId: p.sessionId, idleMs, category: p.category, rules: p.rules }
        : { kind: "profile", subject: p.subject, proof: p.proof, category: p.category, rules: p.rules },
    dryRun,
    withdrawal,
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
  const { tier, ownRule, sessionExpiresAtMs, userId } = identity;
  return { kind: "ok", tier, hit, ownRule, sessionExpiresAtMs, userId };
}

/**
 * The decision when the store failed or missed the deadline. A refusal (503) also withdraws the call
 * (see Withdrawal): a request refused without the store's answer is never recorded, should Redis
 * run the call late. A degraded allow, or a 401 (counted as any bad credential), stays counted.
 */
export function withoutStore(p: Counted, failureMode: FailureMode, call: LimitRequest): Decision {
  const decision = decideDegraded(p, failureMode);
  if (call.withdrawal !== undefined && decision.kind === "deny" && decision.status === 503)
    call.withdrawal.refuse();
  return decision;
}
