// The public API on PORT: login, logout, sessions and /me, each validating its own token and session.
import express, { type Request, type RequestHandler, type Response } from "express";
import { z } from "zod";
import type { AuthService } from "../auth/auth-service.js";
import { ID_PATTERN } from "../auth/jwt.js";
import type { Identity, Session } from "../auth/types.js";
import { type ClientIpOptions, clientIp } from "../frontends/client-ip.js";
import type { Logger } from "../process/logger.js";
import { createReadiness, type Readiness } from "../process/readiness.js";
import type { ApiStore } from "./api-store.js";
import { bearerChallenge, errorHandler, HttpError, jsonBody } from "./errors.js";
import { bearerToken, handle, noStore } from "./handlers.js";
import { unmatched } from "./methods.js";
import { requestLogger } from "./request-log.js";
import { cleanText } from "./sanitize.js";

export type PublicApiOptions = {
  auth: AuthService;
  store: ApiStore;
  logger: Logger;
  clientIp: ClientIpOptions;
  readyTimeoutMs: number;
  /** Start-up and stop phases; always ready when omitted. */
  readiness?: Readiness;
};

const loginSchema = z.object({
  username: z.string().min(1).max(64),
  password: z.string().min(1).max(1024),
});

export const DEVICE_NAME_MAX = 100;
export const USER_AGENT_MAX = 256;

type AuthedHandler = (req: Request, res: Response, identity: Identity) => Promise<void>;

export function sessionJson(session: Session, currentSessionId?: string) {
  return {
    session_id: session.sessionId,
    device_name: session.deviceName,
    ip: session.ip,
    user_agent: session.userAgent,
    created_at: new Date(session.createdAt).toISOString(),
    last_accessed: new Date(session.lastAccessed).toISOString(),
    ...(currentSessionId === undefined ? {} : { is_current: session.sessionId === currentSessionId }),
  };
}

const ALWAYS_READY = createReadiness("ready");

/** 503 with Retry-After while the process is starting or stopping. */
function notReady(readiness: Readiness): HttpError | undefined {
  switch (readiness.phase()) {
    case "ready":
      return undefined;
    case "starting":
      return new HttpError("unavailable", "tollgate is starting: users are not loaded yet", {
        "Retry-After": "1",
      });
    case "stopping":
      return new HttpError("unavailable", "tollgate is stopping", { "Retry-After": "1" });
  }
}

export function healthRoutes(
  router: express.Router,
  options: { store: ApiStore; readyTimeoutMs: number; readiness?: Readiness | undefined },
): void {
  const { store, readyTimeoutMs } = options;
  const readiness = options.readiness ?? ALWAYS_READY;
  router.get("/health", (_req, res) => {
    res.json({ status: "ok" });
  });
  router.get(
    "/ready",
    handle(async (_req, res) => {
      const phaseError = notReady(readiness);
      if (phaseError !== undefined) throw phaseError;
      if (await store.ping(readyTimeoutMs)) {
        res.json({ status: "ready", store: store.kind });
      } else {
        throw new HttpError("unavailable", "The store does not answer", { "Retry-After": "1" });
      }
    }),
  );
}

export function createPublicApi(options: PublicApiOptions): express.Express {
  const { auth, store, logger } = options;
  const app = express();
  app.disable("x-powered-by");
  app.set("etag", false);

  const authed = (fn: AuthedHandler): RequestHandler =>
    handle(async (req, res) => {
      const result = await auth.authenticate(bearerToken(req.headers.authorization));
      if (result.kind !== "ok") {
        const description = result.reason === "missing" ? undefined : result.description;
        throw new HttpError(
          "unauthorized",
          result.reason === "missing" ? "Authentication required" : result.description,
          {
            "WWW-Authenticate": bearerChallenge(description),
          },
        );
      }
      await fn(req, res, result.identity);
    });

  const router = express.Router();
  const readiness = options.readiness ?? ALWAYS_READY;
  healthRoutes(router, { store, readyTimeoutMs: options.readyTimeoutMs, readiness });

  router.post(
    "/auth/login",
    ...jsonBody,
    handle(async (req, res) => {
      // Before the users are loaded every login would fail (and count toward a lockout): not yet.
      if (readiness.phase() === "starting") throw notReady(readiness) as HttpError;
      const body = loginSchema.safeParse(req.body);
      if (!body.success) {
        throw new HttpError("bad_request", "Send a JSON body with string fields username and password");
      }
      const result = await auth.login({
        username: body.data.username,
        password: body.data.password,
        ip: clientIp(
          req.headers["x-forwarded-for"] as string | undefined,
          req.socket.remoteAddress,
          options.clientIp,
        ),
        userAgent: cleanText(req.headers["user-agent"], USER_AGENT_MAX),
        deviceName: cleanText(req.headers["x-device-name"], DEVICE_NAME_MAX) || "unknown",
        log: requestLogger(logger, req),
      });
      if (result.kind === "invalid_credentials") {
        throw new HttpError("unauthorized", "Invalid username or password", {
          "WWW-Authenticate": bearerChallenge(undefined),
        });
      }
      if (result.kind === "busy") {
        throw new HttpError("unavailable", "Too many logins are in progress; try again shortly", {
          "Retry-After": "1",
        });
      }
      if (result.kind === "locked") {
        const seconds = Math.max(1, Math.ceil(result.retryAfterMs / 1000));
        throw new HttpError(
          "rate_limit_exceeded",
          "Too many failed logins for this username; try again later",
          {
            "Retry-After": String(seconds),
          },
        );
      }
      noStore(res).json({
        access_token: result.token,
        token_type: "Bearer",
        expires_in: result.expiresIn,
        session_id: result.sessionId,
        user_id: result.userId,
        tier: result.tier,
      });
    }),
  );

  router.post(
    "/auth/logout",
    authed(async (req, res, identity) => {
      await auth.logout(identity, requestLogger(logger, req));
      res.json({ message: "Logged out from this device" });
    }),
  );

  router.post(
    "/auth/logout-all",
    authed(async (req, res, identity) => {
      const revoked = await auth.logoutAll(identity, requestLogger(logger, req));
      res.json({ message: `Logged out from ${revoked} devices`, revoked });
    }),
  );

  router.get(
    "/auth/sessions",
    authed(async (_req, res, identity) => {
      const sessions = await auth.listSessions(identity.userId);
      res.json({ sessions: sessions.map((s) => sessionJson(s, identity.sessionId)), total: sessions.length });
    }),
  );

  router.post(
    "/auth/sessions/:sid/revoke",
    authed(async (req, res, identity) => {
      const sid = String(req.params.sid);
      if (sid === identity.sessionId) {
        throw new HttpError("bad_request", "This is the current session; use POST /auth/logout");
      }
      const result = ID_PATTERN.test(sid)
        ? await auth.revokeSession(identity, sid, requestLogger(logger, req))
        : "not_found";
      if (result === "not_found") throw new HttpError("not_found", "No such session for this user");
      res.json({ message: "Session revoked", session_id: sid });
    }),
  );

  router.get(
    "/me",
    authed(async (_req, res, identity) => {
      const [user, sessions] = await Promise.all([
        store.users.get(identity.userId),
        auth.listSessions(identity.userId),
      ]);
      const current = sessions.find((s) => s.sessionId === identity.sessionId);
      res.json({
        user_id: identity.userId,
        username: user?.username ?? "",
        tier: identity.tier,
        device: current?.deviceName ?? "",
        session_id: identity.sessionId,
      });
    }),
  );

  router.use(unmatched(router));
  app.use(router);
  app.use(errorHandler(logger));
  return app;
}
