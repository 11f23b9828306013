// The admin and ops API on ADMIN_PORT: users, sessions, tiers, limits and /metrics, behind tokens.
import express, { type Request, type RequestHandler } from "express";
import { z } from "zod";
import { ID_PATTERN } from "../auth/jwt.js";
import type { Lockout } from "../auth/lockout.js";
import { hashPassword } from "../auth/passwords.js";
import type { User } from "../auth/types.js";
import { blockUserKeys } from "../auth/user-keys.js";
import { removeUsers } from "../auth/user-removal.js";
import { newUsernameSchema } from "../auth/usernames.js";
import type { Checker } from "../check/checker.js";
import type { Metrics } from "../metrics/metrics.js";
import { ANONYMOUS_TIER } from "../policy/policy.js";
import type { PolicyState } from "../policy/policy-state.js";
import type { ReloadAnswer } from "../policy/reload-report.js";
import type { Logger } from "../process/logger.js";
import type { Readiness } from "../process/readiness.js";
import type { RlsConfig } from "../rls/model.js";
import { identityRoutes } from "./admin-identities.js";
import { limitsRoutes } from "./admin-limits.js";
import { policyRoutes } from "./admin-policy.js";
import { sessionRoutes } from "./admin-sessions.js";
import type { ApiStore } from "./api-store.js";
import { errorHandler, HttpError, jsonBody } from "./errors.js";
import { handle, parse, parseQuery, requireBearer, wholeNumberParameter } from "./handlers.js";
import { unmatched } from "./methods.js";
import { healthRoutes } from "./public-api.js";
import { requestLogger } from "./request-log.js";

export type AdminApiOptions = {
  store: ApiStore;
  /**
   * Failed logins per username. A locked name is freed by the operator, a new password, re-enabling
   * its user, and a deletion or creation (a name's failures never outlive the user they were for).
   */
  lockout: Pick<Lockout, "clear">;
  /** The policy in force: tiers and categories are read from it on every request. */
  policy: PolicyState;
  /** The rate limit service's configuration in force (GET /admin/rls); undefined when RLS_CONFIG is unset. */
  rls?: () => RlsConfig | undefined;
  /** Re-reads POLICY_FILE and RLS_CONFIG (counted and logged by the caller; WORKERS: on every worker). */
  reloadPolicy(): Promise<ReloadAnswer>;
  /** The check, for dry runs, with the IPv6 prefix length that real checks key clients by. */
  checker: Checker;
  ipv6Subnet: number;
  logger: Logger;
  metrics: Metrics;
  adminToken: string;
  metricsToken: string | undefined;
  readyTimeoutMs: number;
  /** Start-up and stop phases for /ready; always ready when omitted. */
  readiness?: Readiness;
};

const passwordSchema = z.string().min(8).max(1024);

const userJson = (user: User) => ({
  user_id: user.id,
  username: user.username,
  tier: user.tier,
  disabled: user.disabled,
  source: user.source,
  created_at: new Date(user.createdAt).toISOString(),
});

export function createAdminApi(options: AdminApiOptions): express.Express {
  const { store, lockout, policy, metrics } = options;
  const processLogger = options.logger;
  const tiersNow = () => [...policy.current().policy.tiers.keys()].filter((t) => t !== ANONYMOUS_TIER);
  const tierSchema = z.string().superRefine((t, ctx) => {
    const tiers = tiersNow();
    if (!tiers.includes(t))
      ctx.addIssue({ code: "custom", message: `tier must be one of ${tiers.join(", ")}` });
  });
  const createSchema = z.strictObject({
    // Stored as typed, unique in its canonical form (auth/usernames.ts): 409 for any form of a taken name.
    username: newUsernameSchema,
    password: passwordSchema,
    tier: tierSchema,
  });
  // Strict: a misspelt ?username= must not answer the first page of every user instead.
  const listSchema = z.strictObject({
    username: z.string().min(1).max(64).optional(),
    cursor: z.string().regex(ID_PATTERN, "not a cursor from a previous page").optional(),
    limit: wholeNumberParameter(1, 500, 100),
  });

  const app = express();
  app.disable("x-powered-by");
  app.set("etag", false);

  const router = express.Router();
  healthRoutes(router, { store, readyTimeoutMs: options.readyTimeoutMs, readiness: options.readiness });

  const metricsGuard: RequestHandler[] =
    options.metricsToken === undefined ? [] : [requireBearer(options.metricsToken, "metrics")];
  router.get(
    "/metrics",
    ...metricsGuard,
    handle(async (_req, res) => {
      res.type(metrics.registry.contentType).send(await metrics.render());
    }),
  );

  const admin = express.Router();
  admin.use(requireBearer(options.adminToken, "admin"));

  const userOf = async (req: Request) => {
    const id = String(req.params.id);
    const user = ID_PATTERN.test(id) ? await store.users.get(id) : undefined;
    if (user === undefined) throw new HttpError("not_found", "No such user");
    return user;
  };
  admin.post(
    "/users",
    ...jsonBody,
    handle(async (req, res) => {
      const logger = requestLogger(processLogger, req);
      const input = parse(createSchema, req.body);
      const created = await store.users.create({
        username: input.username,
        tier: input.tier,
        passwordHash: await hashPassword(input.password),
      });
      if (created === "exists") throw new HttpError("conflict", "That username is taken");
      // Guesses at the name before it had a user must not lock the new user out.
      await lockout.clear(created.username);
      logger.info({ event: "user_created", userId: created.id, tier: created.tier }, "user created");
      res.status(201).json({ user_id: created.id, username: created.username, tier: created.tier });
    }),
  );

  admin.get(
    "/users",
    handle(async (req, res) => {
      const { username, cursor, limit } = parseQuery(listSchema, req.query);
      if (username !== undefined && (req.query.cursor !== undefined || req.query.limit !== undefined)) {
        throw new HttpError(
          "bad_request",
          "username: looks one user up, where cursor and limit page the list: send one or the other",
        );
      }
      if (username !== undefined) {
        const user = await store.users.findByUsername(username);
        if (user === undefined) throw new HttpError("not_found", "No such user");
        res.json(userJson(user));
        return;
      }
      const page = await store.users.list({ cursor, limit });
      res.json({ users: page.users.map(userJson), next_cursor: page.nextCursor ?? null });
    }),
  );

  admin.get(
    "/users/:id",
    handle(async (req, res) => {
      res.json(userJson(await userOf(req)));
    }),
  );

  admin.put(
    "/users/:id/password",
    ...jsonBody,
    handle(async (req, res) => {
      const logger = requestLogger(processLogger, req);
      const { password } = parse(z.strictObject({ password: passwordSchema }), req.body);
      const user = await userOf(req);
      const passwordHash = await hashPassword(password);
      // Counted first; the change itself then deletes, in its one step, any session a login that
      // verified the old password created since, and a login after it finds another hash and gets
      // none. A 503 at either step leaves no session from before a password that was set.
      const revoked = await store.sessions.revokeAll(user.id);
      if (!(await store.users.update(user.id, { passwordHash })))
        throw new HttpError("not_found", "No such user");
      // Guesses at the old password say nothing about the new one: the user may log in at once.
      await lockout.clear(user.username);
      logger.info({ event: "password_changed", userId: user.id, revoked, by: "admin" }, "password changed");
      res.json({ message: "Password changed; every session revoked", user_id: user.id, revoked });
    }),
  );

  admin.delete(
    "/users/:id",
    handle(async (req, res) => {
      const logger = requestLogger(processLogger, req);
      const user = await userOf(req);
      const { categories } = policy.current().policy;
      let revoked = 0;
      const keys = await removeUsers({ ...store, categories, lockout }, [user], (done) => {
        revoked = done.sessions;
      });
      logger.info({ event: "user_deleted", userId: user.id, revoked, apiKeys: keys }, "user deleted");
      res.json({
        message: "User deleted; every session and API key revoked",
        user_id: user.id,
        revoked,
        api_keys_revoked: keys,
      });
    }),
  );

  admin.put(
    "/users/:id/tier",
    ...jsonBody,
    handle(async (req, res) => {
      const logger = requestLogger(processLogger, req);
      const { tier } = parse(z.strictObject({ tier: tierSchema }), req.body);
      const user = await userOf(req);
      await store.users.update(user.id, { tier });
      metrics.authEvents.inc({ event: "tier_changed" });
      logger.info({ event: "tier_changed", userId: user.id, from: user.tier, to: tier }, "tier changed");
      res.json({ message: "Tier changed; effective on the next request", user_id: user.id, tier });
    }),
  );

  admin.put(
    "/users/:id/disabled",
    ...jsonBody,
    handle(async (req, res) => {
      const logger = requestLogger(processLogger, req);
      const { disabled } = parse(z.strictObject({ disabled: z.boolean() }), req.body);
      const user = await userOf(req);
      // Disabling also ends every session, so re-enabling never brings an old token back: after the
      // flag (a login that verified the password before it then gets no session), and again before
      // it is cleared, for sessions a disable that failed half-way (503) left behind. No session is
      // created while the user is disabled, so the second pass ends nothing else.
      const leftOver = !disabled && user.disabled ? await store.sessions.revokeAll(user.id) : 0;
      await store.users.update(user.id, { disabled });
      const revoked = disabled ? await store.sessions.revokeAll(user.id) : leftOver;
      // The user's API keys are refused while it is disabled, and accepted again with it.
      const keys = await blockUserKeys(store.apiKeys, user.id, disabled);
      // Re-enabling gives a fresh start: while disabled, every login (the user's own, with the right
      // password) failed and counted toward the lockout.
      if (!disabled && user.disabled) await lockout.clear(user.username);
      logger.info(
        { event: disabled ? "user_disabled" : "user_enabled", userId: user.id, revoked, apiKeys: keys },
        "user access changed",
      );
      res.json({
        user_id: user.id,
        disabled,
        revoked,
        [disabled ? "api_keys_blocked" : "api_keys_unblocked"]: keys,
      });
    }),
  );

  admin.delete(
    "/users/:id/lockout",
    handle(async (req, res) => {
      const logger = requestLogger(processLogger, req);
      const user = await userOf(req);
      await lockout.clear(user.username);
      logger.info({ event: "lockout_cleared", userId: user.id }, "a username's failed logins cleared");
      res.status(204).end();
    }),
  );

  sessionRoutes(admin, { store, metrics, logger: processLogger, userOf });
  limitsRoutes(admin, { store, policy, logger: processLogger, userOf });
  identityRoutes(admin, { store, policy, logger: processLogger, tierSchema });
  policyRoutes(admin, {
    policy,
    reloadPolicy: options.reloadPolicy,
    checker: options.checker,
    ipv6Subnet: options.ipv6Subnet,
    rls: options.rls ?? (() => undefined),
  });

  // Each router answers what none of its routes took: under /admin, only once the token passed.
  admin.use(unmatched(admin));
  router.use("/admin", admin);
  router.use(unmatched(router));
  app.use(router);
  app.use(errorHandler(processLogger));
  return app;
}
