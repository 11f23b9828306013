// Login, token authentication and session management: the identity rules, free of HTTP.
import type { Config } from "../config/env.js";
import type { Logger } from "../process/logger.js";
import { sidPrefix } from "../process/logger.js";
import { createThrottledLog } from "../process/throttled-log.js";
import type { TokenCheck, TokenService } from "./jwt.js";
import type { Lockout } from "./lockout.js";
import { verifyPassword } from "./passwords.js";
import type { Identity, Session, SessionStore, UserStore } from "./types.js";
import { canonicalUsername } from "./usernames.js";

export type LoginInput = {
  username: string;
  password: string;
  ip: string;
  userAgent: string;
  deviceName: string;
  /** The request's logger (its request id on every line); the service's own when omitted. */
  log?: Logger;
};

export type LoginResult =
  | { kind: "ok"; token: string; expiresIn: number; sessionId: string; userId: string; tier: string }
  | { kind: "invalid_credentials" }
  | { kind: "locked"; retryAfterMs: number }
  /** MAX_PENDING_LOGINS logins wait on their password check already: refused at once, counted nowhere. */
  | { kind: "busy" };

export type AuthResult =
  | { kind: "ok"; identity: Identity }
  | { kind: "unauthorized"; reason: "missing" | "invalid" | "expired" | "revoked"; description: string };

export type RevokeResult = "revoked" | "current" | "not_found";

export type AuthEvent =
  | "login"
  | "login_failed"
  | "logout"
  | "logout_all"
  | "session_revoked"
  | "session_evicted"
  | "lockout"
  | "login_busy";

export type AuthServiceOptions = {
  config: Pick<Config, "sessionIdleTtlSeconds" | "sessionMaxAgeSeconds" | "maxSessionsPerUser">;
  /** The ports the service uses; their failures surface as StoreUnavailableError (503). */
  users: UserStore;
  sessions: SessionStore;
  /** Failed logins per username (LOGIN_LOCKOUT), whatever the address. */
  lockout: Lockout;
  tokens: TokenService;
  logger: Logger;
  onEvent?: (event: AuthEvent) => void;
  /** Users who may never log in or pass a check here (the demo users, in production). */
  refusedUserIds?: ReadonlySet<string>;
};

/**
 * Logins one process holds at once, waiting for or running their password check. Each costs a
 * scrypt derivation (16 MiB, tens of ms) on libuv's threads, four by default and shared with DNS
 * lookups and file reads: a flood sent to PORT past the proxy (whose check applies the policy's
 * per-address login limit) would queue without bound, every login behind it waiting longer. Past
 * it a login is answered 503 at once, before the lockout counts it. About two seconds of scrypt on
 * four threads.
 */
export const MAX_PENDING_LOGINS = 128;

export function createAuthService(options: AuthServiceOptions) {
  const { config, users, sessions, lockout, tokens } = options;
  const emit = options.onEvent ?? (() => {});
  const refusedUserIds = options.refusedUserIds ?? new Set<string>();
  const idleMs = config.sessionIdleTtlSeconds * 1000;
  const lifetimes = {
    idleMs,
    maxAgeMs: config.sessionMaxAgeSeconds * 1000,
    maxPerUser: config.maxSessionsPerUser,
  };
  /**
   * The login in progress per username, keyed by its canonical form (the lockout's own key): every
   * spelling of one name ("Alice", "ALICE", fullwidth "Ａｌｉｃｅ") waits in one queue. The bound on
   * guesses is the lockout's atomic count, which holds across processes; the queue only orders one
   * process's attempts on a name, so that a right password's reset follows the attempts before it,
   * and one burst costs one scrypt derivation at a time.
   */
  const inFlight = new Map<string, Promise<unknown>>();

  let pending = 0;
  // A flood must not flood the log too: one line a second, with the count of the others.
  const busyLog = createThrottledLog({
    logger: options.logger,
    level: "warn",
    event: "login_busy",
    message: "login refused: MAX_PENDING_LOGINS logins are waiting on their password check",
  });

  function login(input: LoginInput): Promise<LoginResult> {
    if (pending >= MAX_PENDING_LOGINS) {
      emit("login_busy");
      busyLog("busy", { ip: input.ip, pending });
      return Promise.resolve({ kind: "busy" });
    }
    pending += 1;
    const name = canonicalUsername(input.username);
    const run = (inFlight.get(name) ?? Promise.resolve()).then(() => attempt(input));
    const settled = run.catch(() => undefined);
    inFlight.set(name, settled);
    void settled.then(() => {
      pending -= 1;
      if (inFlight.get(name) === settled) inFlight.delete(name);
    });
    return run;
  }

  /**
   * Every attempt is counted as a failure before its password is checked, by the store in one
   * atomic step: the 11th of a burst is refused by the store itself, whichever process serves it.
   * A right password then forgets the name's failures, its own with them, so that logging in never
   * moves a user toward the lockout. The store can take back only a whole window, so a user's login
   * also forgets the guesses at the name before it: a guesser gains at most LOGIN_LOCKOUT attempts
   * per login of the real user. Keeping a right password counted instead would lock out a user who
   * logs in LOGIN_LOCKOUT times in one window (several devices, a script).
   */
  async function attempt(input: LoginInput): Promise<LoginResult> {
    const logger = input.log ?? options.logger;
    const retryAfterMs = await lockout.attempt(input.username);
    if (retryAfterMs > 0) {
      emit("lockout");
      logger.warn(
        { event: "lockout", ip: input.ip },
        "login refused: too many failed attempts for this username",
      );
      return { kind: "locked", retryAfterMs };
    }
    const found = await users.findByUsername(input.username);
    // Demo users never log in where they are refused (production), whatever the store holds.
    const user = found !== undefined && refusedUserIds.has(found.id) ? undefined : found;
    // Unknown users cost the same scrypt work as a wrong password, and get the same answer.
    const valid = await verifyPassword(input.password, found?.passwordHash);
    // The session is created only if the user is still enabled with the password just verified,
    // checked by the store in the same atomic step: a disable, deletion or password change that
    // lands during this login leaves no session behind.
    const created =
      user === undefined || !valid || user.disabled
        ? "refused"
        : await sessions.create(
            {
              userId: user.id,
              deviceName: input.deviceName,
              ip: input.ip,
              userAgent: input.userAgent,
              passwordHash: user.passwordHash,
            },
            lifetimes,
          );
    if (user === undefined || created === "refused") {
      // Already counted as a failure, before the password was checked.
      emit("login_failed");
      logger.info({ event: "login_failed", ip: input.ip }, "login failed");
      return { kind: "invalid_credentials" };
    }
    const { session, evicted } = created;
    await forgetFailures(input, user.id, logger);
    const { token, expiresIn } = tokens.sign({ sub: user.id, sid: session.sessionId, tier: user.tier });
    emit("login");
    logger.info(
      { event: "login", userId: user.id, sid: sidPrefix(session.sessionId), ip: input.ip },
      "login succeeded",
    );
    for (const sid of evicted) {
      emit("session_evicted");
      logger.info(
        { event: "session_evicted", userId: user.id, sid: sidPrefix(sid) },
        "oldest session evicted",
      );
    }
    return { kind: "ok", token, expiresIn, sessionId: session.sessionId, userId: user.id, tier: user.tier };
  }

  /**
   * Takes back the attempt counted before the password was checked (and the failures before it).
   * The session exists by now: a store that fails here leaves one failure counted, not a failed login.
   */
  async function forgetFailures(input: LoginInput, userId: string, logger: Logger): Promise<void> {
    try {
      await lockout.clear(input.username);
    } catch (error) {
      logger.warn(
        { event: "lockout_not_cleared", userId, err: (error as Error).message },
        "login succeeded, but its attempt could not be taken back from the username's failed logins",
      );
    }
  }

  /** Validates a bearer token and its session (renewing it); the public API trusts nothing else. */
  async function authenticate(token: string | undefined): Promise<AuthResult> {
    if (token === undefined)
      return { kind: "unauthorized", reason: "missing", description: "no bearer token" };
    const check: TokenCheck = tokens.verify(token);
    if (!check.ok) return { kind: "unauthorized", reason: check.reason, description: check.description };
    const { sub: userId, sid: sessionId } = check.claims;
    if (refusedUserIds.has(userId)) {
      return { kind: "unauthorized", reason: "revoked", description: "session expired or revoked" };
    }
    const session = await sessions.touch(userId, sessionId, idleMs);
    if (session.kind !== "ok") {
      return { kind: "unauthorized", reason: "revoked", description: "session expired or revoked" };
    }
    return { kind: "ok", identity: { userId, sessionId, tier: session.tier } };
  }

  async function logout(identity: Identity, logger = options.logger): Promise<void> {
    await sessions.revoke(identity.userId, identity.sessionId);
    emit("logout");
    logger.info(
      { event: "logout", userId: identity.userId, sid: sidPrefix(identity.sessionId) },
      "logged out",
    );
  }

  async function logoutAll(identity: Identity, logger = options.logger): Promise<number> {
    const revoked = await sessions.revokeAll(identity.userId);
    emit("logout_all");
    logger.info({ event: "logout_all", userId: identity.userId, revoked }, "logged out from every device");
    return revoked;
  }

  async function listSessions(userId: string): Promise<Session[]> {
    return sessions.list(userId);
  }

  async function revokeSession(
    identity: Identity,
    sessionId: string,
    logger = options.logger,
  ): Promise<RevokeResult> {
    if (sessionId === identity.sessionId) return "current";
    const own = await sessions.list(identity.userId);
    if (!own.some((s) => s.sessionId === sessionId)) return "not_found";
    await sessions.revoke(identity.userId, sessionId);
    emit("session_revoked");
    logger.info(
      { event: "session_revoked", userId: identity.userId, sid: sidPrefix(sessionId) },
      "session revoked by its user",
    );
    return "revoked";
  }

  return {
    login,
    authenticate,
    logout,
    logoutAll,
    listSessions,
    revokeSession,
  };
}

export type AuthService = ReturnType<typeof createAuthService>;
