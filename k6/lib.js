// @ts-check
/**
 * Shared helpers for the k6 scripts in this folder (not a test by itself): the URLs and admin token
 * from the environment, login through the proxy, and case-insensitive header and JSON access.
 *
 *   BASE_URL     the proxy (Envoy :10000 or nginx), default http://127.0.0.1:10000
 *   ADMIN_URL    tollgate's ADMIN_PORT, default http://127.0.0.1:9090
 *   ADMIN_TOKEN  bearer token for ADMIN_URL; unset means "no admin access"
 */
import { check, fail } from "k6";
import http from "k6/http";

/** @param {string | undefined} value @param {string} fallback */
function baseUrl(value, fallback) {
  return (value && value.trim() !== "" ? value.trim() : fallback).replace(/\/+$/, "");
}

export const BASE_URL = baseUrl(__ENV.BASE_URL, "http://127.0.0.1:10000");
export const ADMIN_URL = baseUrl(__ENV.ADMIN_URL, "http://127.0.0.1:9090");
export const ADMIN_TOKEN = (__ENV.ADMIN_TOKEN || "").trim();

export const DEMO_PASSWORD = "secret";

/** @typedef {import("k6/http").Response} Response */
/** @typedef {{ token: string, sessionId: string, userId: string, tier: string }} Session */

/** @param {string} token @returns {Record<string, string>} */
export function bearer(token) {
  return { Authorization: `Bearer ${token}` };
}

/** @param {Record<string, string>} [extra] @returns {Record<string, string>} */
export function jsonHeaders(extra = {}) {
  // Object.assign, not spread: k6 before 0.52 cannot parse object spread (see docs/tests.md).
  return Object.assign({ "Content-Type": "application/json" }, extra);
}

/**
 * k6 reports header names in Go's canonical form (X-Ratelimit-Limit, not X-RateLimit-Limit), so
 * every lookup goes through here.
 * @param {Response} res @param {string} name @returns {string | undefined}
 */
export function header(res, name) {
  const wanted = name.toLowerCase();
  for (const [key, value] of Object.entries(res.headers)) {
    if (key.toLowerCase() === wanted) return value;
  }
  return undefined;
}

/** @param {Response} res @param {string} name @returns {number} NaN when absent or not a number */
export function headerNumber(res, name) {
  const value = header(res, name);
  return value === undefined || value.trim() === "" ? Number.NaN : Number(value);
}

/**
 * The response body as a JSON object, or an empty object when it is not one.
 * @param {Response} res @returns {Record<string, unknown>}
 */
export function jsonBody(res) {
  if (typeof res.body !== "string" || res.body === "") return {};
  try {
    const value = JSON.parse(res.body);
    return value !== null && typeof value === "object" && !Array.isArray(value) ? value : {};
  } catch (_notJson) {
    // A catch with a binding: k6 before 0.52 cannot parse one without.
    return {};
  }
}

/**
 * POST /auth/login through the proxy. Records a check either way; on failure it ends the iteration
 * (or setup) with a message, so the failed check is what the thresholds see.
 * @param {string} username @param {string} password @param {string} [deviceName]
 * @returns {Session}
 */
export function login(username, password, deviceName = "k6") {
  const res = http.post(`${BASE_URL}/auth/login`, JSON.stringify({ username, password }), {
    headers: jsonHeaders({ "X-Device-Name": deviceName }),
    tags: { name: "POST /auth/login" },
  });
  const body = jsonBody(res);
  const ok = check(res, {
    [`login ${username}: 200`]: (r) => r.status === 200,
    [`login ${username}: access_token`]: () =>
      typeof body.access_token === "string" && body.access_token !== "",
  });
  if (!ok) fail(`login as ${username} failed: ${res.status} ${String(res.body).slice(0, 200)}`);
  return {
    token: String(body.access_token),
    sessionId: String(body.session_id),
    userId: String(body.user_id),
    tier: String(body.tier),
  };
}

/** A short random string for unique names. @param {number} [length] */
export function randomSuffix(length = 10) {
  let out = "";
  while (out.length < length) out += Math.random().toString(36).slice(2);
  return out.slice(0, length);
}
