// Admin: a user's windows as they stand, the user's own limits beside the tier's, and resetting both.
import type { Request, Router } from "express";
import { z } from "zod";
import type { User } from "../auth/types.js";
import { limitText } from "../config/rules.js";
import type { PolicyState } from "../policy/policy-state.js";
import { windowsOrNullSchema } from "../policy/schema.js";
import type { Logger } from "../process/logger.js";
import { type Rule, userSubject, type Window } from "../ratelimit/types.js";
import type { ApiStore } from "./api-store.js";
import { HttpError, jsonBody, shown } from "./errors.js";
import { handle, parse } from "./handlers.js";
import { requestLogger } from "./request-log.js";

/** Per category: its limit or list of limits (as a policy writes them), or null to follow the tier again. */
const ownLimitsSchema = z
  .record(z.string(), windowsOrNullSchema)
  .refine((body) => Object.keys(body).length > 0, "give at least one category");

export function limitsRoutes(
  admin: Router,
  options: { store: ApiStore; policy: PolicyState; logger: Logger; userOf(req: Request): Promise<User> },
): void {
  const { store, policy, userOf } = options;
  const processLogger = options.logger;
  const texts = (windows: readonly Window[]) => windows.map(limitText);

  admin.get(
    "/users/:id/limits",
    handle(async (req, res) => {
      const user = await userOf(req);
      const limits: Record<string, unknown> = {};
      for (const [category, tierRule] of policy.current().policy.tiers.get(user.tier) ?? []) {
        const own = user.limits[category];
        const rule: Rule = own === undefined ? tierRule : { algorithm: tierRule.algorithm, windows: own };
        const windows = await store.limiter.peek(userSubject(user.id), { category, rule });
        // The window closest to refusing speaks for the category, as the check's headers do.
        const closest = windows.reduce((a, b) => (b.remaining < a.remaining ? b : a));
        limits[category] = {
          limit: closest.limit,
          used: closest.used,
          remaining: closest.remaining,
          reset: Math.ceil(closest.resetAtMs / 1000),
          algorithm: rule.algorithm,
          source: own === undefined ? "tier" : "user",
          tier_limits: texts(tierRule.windows),
          own_limits: own === undefined ? null : texts(own),
          windows: windows.map((w) => ({
            limit: w.limit,
            window_seconds: w.windowMs / 1000,
            used: w.used,
            remaining: w.remaining,
            reset: Math.ceil(w.resetAtMs / 1000),
          })),
        };
      }
      res.json({ user_id: user.id, tier: user.tier, limits });
    }),
  );

  admin.put(
    "/users/:id/limits",
    ...jsonBody,
    handle(async (req, res) => {
      const logger = requestLogger(processLogger, req);
      const body = parse(ownLimitsSchema, req.body);
      const user = await userOf(req);
      const categories = policy.current().policy.tiers.get(user.tier);
      for (const category of Object.keys(body)) {
        if (categories?.has(category) !== true) {
          const known = [...(categories?.keys() ?? [])].join(", ");
          throw new HttpError(
            "bad_request",
            `${shown(category)}: not a category of tier ${user.tier} (${known})`,
          );
        }
      }
      if (!(await store.users.update(user.id, { limits: body })))
        throw new HttpError("not_found", "No such user");
      const after = (await store.users.get(user.id))?.limits ?? {};
      const ownLimits = Object.fromEntries(Object.entries(after).map(([c, w]) => [c, texts(w)]));
      logger.info(
        { event: "limits_set", userId: user.id, categories: Object.keys(body) },
        "a user's own limits set",
      );
      res.json({
        message: "Own limits set; effective on the next request",
        user_id: user.id,
        own_limits: ownLimits,
      });
    }),
  );

  admin.delete(
    "/users/:id/limits",
    handle(async (req, res) => {
      const logger = requestLogger(processLogger, req);
      const user = await userOf(req);
      // A fresh start on the tier: the user's own limits go, and the windows counted so far.
      const cleared = Object.fromEntries(Object.keys(user.limits).map((c) => [c, null]));
      if (Object.keys(cleared).length > 0) await store.users.update(user.id, { limits: cleared });
      await store.limiter.reset(userSubject(user.id), policy.current().policy.categories);
      logger.info({ event: "limits_reset", userId: user.id }, "a user's own limits and windows cleared");
      res.json({ message: "Own limits and rate-limit windows cleared", user_id: user.id });
    }),
  );
}
