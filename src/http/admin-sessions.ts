// Admin: a user's sessions, listed and revoked one at a time or all at once.
import type { Request, Router } from "express";
import { ID_PATTERN } from "../auth/jwt.js";
import type { User } from "../auth/types.js";
import type { Metrics } from "../metrics/metrics.js";
import type { Logger } from "../process/logger.js";
import type { ApiStore } from "./api-store.js";
import { HttpError } from "./errors.js";
import { handle } from "./handlers.js";
import { sessionJson } from "./public-api.js";
import { requestLogger } from "./request-log.js";

export function sessionRoutes(
  admin: Router,
  options: { store: ApiStore; metrics: Metrics; logger: Logger; userOf(req: Request): Promise<User> },
): void {
  const { store, metrics, userOf } = options;
  const processLogger = options.logger;

  admin.post(
    "/users/:id/revoke",
    handle(async (req, res) => {
      const logger = requestLogger(processLogger, req);
      const user = await userOf(req);
      const revoked = await store.sessions.revokeAll(user.id);
      metrics.authEvents.inc({ event: "admin_revoke" });
      logger.info(
        { event: "admin_revoke", userId: user.id, revoked },
        "admin revoked every session of a user",
      );
      res.json({ message: `Revoked ${revoked} session${revoked === 1 ? "" : "s"}`, revoked });
    }),
  );

  admin.get(
    "/users/:id/sessions",
    handle(async (req, res) => {
      const user = await userOf(req);
      const sessions = await store.sessions.list(user.id);
      res.json({ sessions: sessions.map((s) => sessionJson(s)), total: sessions.length });
    }),
  );

  admin.delete(
    "/users/:id/sessions/:sid",
    handle(async (req, res) => {
      const logger = requestLogger(processLogger, req);
      const user = await userOf(req);
      const sid = String(req.params.sid);
      if (!ID_PATTERN.test(sid) || !(await store.sessions.revoke(user.id, sid)))
        throw new HttpError("not_found", "No such session of this user");
      metrics.authEvents.inc({ event: "admin_revoke" });
      logger.info(
        { event: "admin_revoke", userId: user.id, revoked: 1 },
        "admin revoked a session of a user",
      );
      res.json({ message: "Revoked 1 session", revoked: 1 });
    }),
  );
}
