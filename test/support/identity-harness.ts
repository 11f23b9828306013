// An in-process tollgate on loopback ports, with a small JSON client for its public and admin APIs.
import { randomBytes } from "node:crypto";
import { createServer, type RequestListener, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { expect } from "vitest";
import { createTollgate, type Tollgate } from "../../src/app.js";
import { createLockout } from "../../src/auth/lockout.js";
import { demoUsers, loadUsers } from "../../src/auth/users-file.js";
import type { Decision } from "../../src/check/types.js";
import { loadConfig } from "../../src/config/env.js";
import { loadPolicy } from "../../src/policy/policy.js";
import { createLogger } from "../../src/process/logger.js";
import type { Store } from "../../src/store/store.js";

export const JWT_SECRET = "x".repeat(32);
export const ADMIN_TOKEN = "y".repeat(32);

export type Reply<T> = { status: number; headers: Headers; body: T };

export type ErrorBody = { error: string; message: string };
export type LoginBody = {
  access_token: string;
  token_type: string;
  expires_in: number;
  session_id: string;
  user_id: string;
  tier: string;
};
export type SessionBody = {
  session_id: string;
  device_name: string;
  ip: string;
  user_agent: string;
  created_at: string;
  last_accessed: string;
  is_current?: boolean;
};
export type SessionsBody = { sessions: SessionBody[]; total: number };
export type MeBody = { user_id: string; username: string; tier: string; device: string; session_id: string };
export type LimitsBody = {
  user_id: string;
  tier: string;
  limits: Record<string, { limit: number; used: number; remaining: number; reset: number }>;
};

export type CallOptions = {
  token?: string;
  json?: unknown;
  /** A raw body, sent as it is: a string goes as text/plain unless `headers` say otherwise, bytes with no type. */
  body?: string | Uint8Array;
  headers?: Record<string, string>;
};

export type Client = <T = ErrorBody>(
  method: string,
  path: string,
  options?: CallOptions,
) => Promise<Reply<T>>;

export function client(base: string): Client {
  return async <T>(method: string, path: string, options: CallOptions = {}): Promise<Reply<T>> => {
    const headers: Record<string, string> = { ...options.headers };
    if (options.token !== undefined) headers.authorization = `Bearer ${options.token}`;
    let body = options.body;
    if (options.json !== undefined) {
      body = JSON.stringify(options.json);
      headers["content-type"] ??= "application/json";
    }
    const response = await fetch(`${base}${path}`, { method, headers, body });
    const text = await response.text();
    const isJson = /^application\/json\b/.test(response.headers.get("content-type") ?? "");
    return {
      status: response.status,
      headers: response.headers,
      body: (isJson ? JSON.parse(text) : text) as T,
    };
  };
}

export type LoginOptions = { device?: string; ip?: string; userAgent?: string };

export type Running = {
  tollgate: Tollgate;
  store: Store;
  api: Client;
  admin: Client;
  /** POST /auth/login as a client behind the proxy at `ip`. */
  login(username: string, password: string, options?: LoginOptions): Promise<Reply<LoginBody | ErrorBody>>;
  /** Logs in and insists on 200. */
  loginOk(username: string, password: string, options?: LoginOptions): Promise<LoginBody>;
  /** A new user through the admin API, with a unique name: a clean slate for one test. */
  newUser(tier?: string): Promise<{ id: string; username: string; password: string }>;
  /** One check as the proxy would ask it, for `GET /api/search` unless told otherwise. */
  check(token: string, path?: string): Promise<Decision>;
  close(): Promise<void>;
};

function listen(app: RequestListener): Promise<{ server: Server; base: string }> {
  return new Promise((resolve, reject) => {
    const server = createServer(app);
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as AddressInfo;
      resolve({ server, base: `http://127.0.0.1:${port}` });
    });
  });
}

function stop(server: Server): Promise<void> {
  server.closeAllConnections();
  return new Promise((resolve) => server.close(() => resolve()));
}

export const uniqueName = (stem: string): string => `${stem}_${randomBytes(4).toString("hex")}`;

/** What start-up applies USERS_FILE to on `store`: its users, sessions and the names' lockout. */
export const fileTarget = (store: Store) => ({
  users: store.users,
  sessions: store.sessions,
  // Its window (LOGIN_LOCKOUT's default) matters to counting failures, not to clearing them.
  lockout: createLockout({ window: { limit: 10, windowMs: 900_000 }, limiter: store.limiter }),
});

/**
 * A tollgate on `store` with the demo users loaded, serving its public and admin apps on loopback.
 * `env` adds to (or overrides) the test's base settings.
 */
export async function startTollgate(options: {
  store: Store;
  env?: Record<string, string>;
  demoUsers?: boolean;
}): Promise<Running> {
  const { store } = options;
  const config = loadConfig({ JWT_SECRET, ADMIN_TOKEN, LOG_LEVEL: "silent", ...options.env });
  const tollgate = createTollgate({
    config,
    policy: loadPolicy(config.policyFile),
    store,
    logger: createLogger("silent"),
  });
  if (options.demoUsers !== false) await loadUsers(store.users, demoUsers());
  const pub = await listen(tollgate.publicApp);
  const adm = await listen(tollgate.adminApp);
  const api = client(pub.base);
  const admin = client(adm.base);

  const login: Running["login"] = (username, password, o = {}) =>
    api<LoginBody | ErrorBody>("POST", "/auth/login", {
      json: { username, password },
      headers: {
        "x-forwarded-for": o.ip ?? "198.51.100.7",
        "user-agent": o.userAgent ?? "identity-contract/1.0",
        ...(o.device === undefined ? {} : { "x-device-name": o.device }),
      },
    });

  const running: Running = {
    tollgate,
    store,
    api,
    admin,
    login,
    async loginOk(username, password, o) {
      const reply = await login(username, password, o);
      expect(reply.status, JSON.stringify(reply.body)).toBe(200);
      return reply.body as LoginBody;
    },
    async newUser(tier = "free") {
      const username = uniqueName("user");
      const password = `pw-${randomBytes(6).toString("hex")}`;
      const reply = await admin<{ user_id: string }>("POST", "/admin/users", {
        token: ADMIN_TOKEN,
        json: { username, password, tier },
      });
      expect(reply.status, JSON.stringify(reply.body)).toBe(201);
      return { id: reply.body.user_id, username, password };
    },
    check(token, path = "/api/search") {
      return tollgate.checker({ method: "GET", path, authorization: `Bearer ${token}`, ip: "203.0.113.5" });
    },
    async close() {
      await Promise.all([stop(pub.server), stop(adm.server)]);
    },
  };
  return running;
}

export const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** The claims of a JWT, read without verifying it. */
export function claimsOf(token: string): Record<string, unknown> {
  const payload = token.split(".")[1] ?? "";
  return JSON.parse(Buffer.from(payload, "base64url").toString("utf8")) as Record<string, unknown>;
}
