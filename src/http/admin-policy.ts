// Admin: the policy in force and its reload, and a dry-run check (the decision, nothing counted).
import type { Router } from "express";
import { z } from "zod";
import type { Checker } from "../check/checker.js";
import type { Decision } from "../check/types.js";
import { normalizeIp } from "../frontends/client-ip.js";
import { renderDecision } from "../frontends/render.js";
import { type PolicyState, policyDocument } from "../policy/policy-state.js";
import type { ReloadAnswer } from "../policy/reload-report.js";
import { describeRlsConfig } from "../rls/match.js";
import type { RlsConfig } from "../rls/model.js";
import { HttpError, jsonBody } from "./errors.js";
import { handle, parse } from "./handlers.js";

/** An HTTP method as a request line carries it: a token (RFC 9110 section 5.6.2), no space or colon. */
const METHOD = /^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,16}$/;

const checkSchema = z.strictObject({
  method: z.string().regex(METHOD, "an HTTP method such as GET, of at most 16 letters"),
  path: z.string().min(1).max(8192),
  authorization: z.string().max(65_536).optional(),
  ip: z.string().max(64).optional(),
});

/** The decision as an admin reads it: what the proxy would answer, and why. */
function explain(decision: Decision, nowMs: number) {
  const rendered = renderDecision(decision, nowMs);
  const base = { status: rendered.status, decision: decision.kind, headers: rendered.headers };
  if (decision.kind === "allow") {
    const { limit } = decision;
    return {
      ...base,
      reason: decision.degraded ? "degraded" : limit?.shadow === true ? "shadow" : "ok",
      tier: decision.identity?.tier ?? limit?.tier ?? "anonymous",
      user_id: decision.identity?.userId ?? null,
      ...(limit === undefined
        ? { category: null }
        : { category: limit.category, limit: limit.limit, remaining: limit.remaining, used: limit.used }),
    };
  }
  switch (decision.status) {
    case 429:
      return {
        ...base,
        reason: "rate_limited",
        tier: decision.limit.tier,
        category: decision.limit.category,
        limit: decision.limit.limit,
        remaining: decision.limit.remaining,
        used: decision.limit.used,
        retry_after_seconds: Math.max(1, Math.ceil(decision.limit.retryAfterMs / 1000)),
      };
    case 401:
      return { ...base, reason: decision.reason, message: decision.description };
    case 400:
      return { ...base, reason: "bad_request", message: decision.description };
    case 503:
      return { ...base, reason: "unavailable" };
  }
}

export function policyRoutes(
  admin: Router,
  options: {
    policy: PolicyState;
    reloadPolicy(): Promise<ReloadAnswer>;
    checker: Checker;
    ipv6Subnet: number;
    rls: () => RlsConfig | undefined;
  },
): void {
  const { policy, checker } = options;

  admin.get(
    "/rls",
    handle(async (_req, res) => {
      const config = options.rls();
      if (config === undefined) {
        throw new HttpError("not_found", "The rate limit service is off: RLS_CONFIG is unset");
      }
      res.json(describeRlsConfig(config));
    }),
  );

  admin.get(
    "/policy",
    handle(async (_req, res) => {
      const active = policy.current();
      res.json({
        version: active.version,
        source: active.source,
        loaded_at: active.loadedAt.toISOString(),
        policy: policyDocument(active.policy),
      });
    }),
  );

  admin.post(
    "/policy/reload",
    handle(async (_req, res) => {
      const answer = await options.reloadPolicy();
      switch (answer.kind) {
        case "invalid": {
          const { kind: _, ...details } = answer;
          throw new HttpError(
            "invalid_policy",
            "The policy file is invalid; the policy in force stays",
            {},
            details,
          );
        }
        case "incomplete": {
          // Not "reloaded": a worker may still run another version, so that a check can land on it.
          const { kind: _, message, ...details } = answer;
          throw new HttpError("reload_incomplete", message, {}, details);
        }
        case "reloaded": {
          const { kind: _, ...fields } = answer;
          res.json({ message: answer.changed ? "Policy reloaded" : "Policy unchanged", ...fields });
        }
      }
    }),
  );

  admin.post(
    "/check",
    ...jsonBody,
    handle(async (req, res) => {
      const body = parse(checkSchema, req.body);
      const raw = body.ip ?? req.socket.remoteAddress ?? "127.0.0.1";
      const ip = normalizeIp(raw, options.ipv6Subnet);
      if (ip === undefined) throw new HttpError("bad_request", "ip: not an IP address");
      const decision = await checker(
        { method: body.method.toUpperCase(), path: body.path, authorization: body.authorization, ip },
        { dryRun: true },
      );
      res.json(explain(decision, Date.now()));
    }),
  );
}
