// @ts-check
/**
 * Smoke walk-through of the whole stack through the proxy, as a user would do it: log in as alice,
 * read /me, call the upstream and see the rate-limit headers, list the session, log out, and find
 * the old token refused. Every step is a check; the run fails unless every check passes.
 *
 *   k6 run -e BASE_URL=http://127.0.0.1:10000 k6/smoke.js
 *   docker compose --profile load run --rm k6 run /scripts/smoke.js
 *
 * Costs: one login from this IP (the anonymous login limit is 10 per 15 minutes), one of alice's
 * 100 general requests and three of her 300 account requests (/me, sessions, logout) per hour.
 */
import { check, fail } from "k6";
import http from "k6/http";
import {
  BASE_URL,
  bearer,
  DEMO_PASSWORD,
  header,
  headerNumber,
  jsonBody,
  jsonHeaders,
  login,
} from "./lib.js";

/** @type {import("k6/options").Options} */
export const options = {
  vus: 1,
  iterations: 1,
  thresholds: {
    checks: ["rate==1.0"],
  },
};

export default function () {
  const session = login("alice", DEMO_PASSWORD, "k6-smoke");
  const headers = bearer(session.token);

  const me = http.get(`${BASE_URL}/me`, { headers, tags: { name: "GET /me" } });
  const meBody = jsonBody(me);
  check(me, {
    "GET /me: 200": (r) => r.status === 200,
    "GET /me: username is alice": () => meBody.username === "alice",
    "GET /me: tier is free": () => meBody.tier === "free",
    "GET /me: session_id is the login's": () => meBody.session_id === session.sessionId,
  });

  const products = http.get(`${BASE_URL}/api/products`, { headers, tags: { name: "GET /api/products" } });
  const limit = headerNumber(products, "X-RateLimit-Limit");
  const remaining = headerNumber(products, "X-RateLimit-Remaining");
  check(products, {
    "GET /api/products: 200": (r) => r.status === 200,
    "GET /api/products: X-RateLimit-Limit is 100 (free, general)": () => limit === 100,
    "GET /api/products: X-RateLimit-Remaining is 0..99": () =>
      Number.isInteger(remaining) && remaining >= 0 && remaining < limit,
    "GET /api/products: X-RateLimit-Resource is general": (r) =>
      header(r, "X-RateLimit-Resource") === "general",
    "GET /api/products: RateLimit-Policy is free-general": (r) =>
      (header(r, "RateLimit-Policy") || "").startsWith('"free-general";q=100;w=3600'),
  });

  const sessions = http.get(`${BASE_URL}/auth/sessions`, { headers, tags: { name: "GET /auth/sessions" } });
  const list = jsonBody(sessions).sessions;
  /** @type {Record<string, unknown> | undefined} */
  const current = Array.isArray(list)
    ? list.find((s) => s !== null && typeof s === "object" && s.session_id === session.sessionId)
    : undefined;
  check(sessions, {
    "GET /auth/sessions: 200": (r) => r.status === 200,
    "GET /auth/sessions: lists this session": () => current !== undefined,
    "GET /auth/sessions: this session is current": () => current !== undefined && current.is_current === true,
    "GET /auth/sessions: device name kept": () => current !== undefined && current.device_name === "k6-smoke",
  });

  const logout = http.post(`${BASE_URL}/auth/logout`, null, {
    headers: jsonHeaders(bearer(session.token)),
    tags: { name: "POST /auth/logout" },
  });
  if (!check(logout, { "POST /auth/logout: 200": (r) => r.status === 200 })) {
    fail(`logout failed: ${logout.status} ${String(logout.body).slice(0, 200)}`);
  }

  const after = http.get(`${BASE_URL}/api/products`, {
    headers,
    tags: { name: "GET /api/products (logged out)" },
  });
  check(after, {
    "old token after logout: 401": (r) => r.status === 401,
    "old token after logout: WWW-Authenticate Bearer": (r) =>
      (header(r, "WWW-Authenticate") || "").startsWith("Bearer"),
    "old token after logout: JSON error unauthorized": (r) => jsonBody(r).error === "unauthorized",
  });
}
