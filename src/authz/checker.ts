// Runs one check: token, plan, the one store call, decision; store failures degrade per FAILURE_MODE.
import type { TokenCheck, TokenService } from "../auth/jwt.js";
import type { AuthorizeStore } from "../auth/types.js";
import type { FailureMode } from "../config/env.js";
import { createDeadline } from "../deadline.js";
import type { RateLimitStore } from "../ratelimit/types.js";
import {
  type CompiledPolicy,
  type Decision,
  decideAnonymous,
  decideDegraded,
  decideUser,
  plan,
} from "./decide.js";

export type CheckRequest = { method: string; path: string; authorization: string | undefined; ip: string };

export type CheckerOptions = {
  compiled: CompiledPolicy;
  tokens: TokenService;
  authorizer: AuthorizeStore;
  limiter: RateLimitStore;
  failureMode: FailureMode;
  /** REDIS_TIMEOUT_MS: the longest a check waits on the store before it degrades. */
  timeoutMs: number;
  idleMs: number;
  /** Users refused whatever the store says (the demo users, in production), even when degraded. */
  refusedUserIds?: ReadonlySet<string>;
  /** Called when the store failed and the check degraded; `operation` names the store call. */
  onStoreError(operation: "authorize" | "hit", error: unknown): void;
  /** Called when a store call succeeded (so a recovery can be noticed). */
  onStoreOk(): void;
};

const NOT_BEARER: TokenCheck = { ok: false, reason: "invalid", description: "expected a Bearer token" };

export function readToken(authorization: string | undefined, tokens: TokenService): TokenCheck | undefined {
  if (authorization === undefined || authorization === "") return undefined;
  // "Bearer <token>", scheme case-insensitive, as RFC 6750 allows.
  if (authorization.length < 8 || authorization.slice(0, 7).toLowerCase() !== "bearer ") return NOT_BEARER;
  return tokens.verify(authorization.slice(7).trim());
}

export type Checker = (request: CheckRequest) => Promise<Decision>;

export function createChecker(options: CheckerOptions): Checker {
  const { compiled, tokens, authorizer, limiter, failureMode, timeoutMs, idleMs, onStoreError, onStoreOk } =
    options;
  const { refusedUserIds } = options;

  const withDeadline = createDeadline(timeoutMs);

  return async (request) => {
    const token = readToken(request.authorization, tokens);
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
    if (p.kind === "anonymous") {
      try {
        const hit = await withDeadline(limiter.hit(p.subject, p.category, p.rule));
        onStoreOk();
        return decideAnonymous(p, hit);
      } catch (error) {
        onStoreError("hit", error);
        return decideDegraded(p, failureMode);
      }
    }
    try {
      const answer = await withDeadline(
        authorizer.authorize({
          userId: p.userId,
          sessionId: p.sessionId,
          category: p.category,
          limits: p.limits,
          idleMs,
        }),
      );
      onStoreOk();
      return decideUser(p, answer);
    } catch (error) {
      onStoreError("authorize", error);
      return decideDegraded(p, failureMode);
    }
  };
}
