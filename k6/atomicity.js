// @ts-check
/**
 * Atomicity of the sliding window under a burst: a fresh free user (general: 100 per hour) fires
 * 500 concurrent GET /api/products through the proxy. Exactly 100 must be allowed (200) and exactly
 * 400 rejected (429): not 101 because two checks raced, not 99 because a denied request was
 * counted. Anything else (503, a degraded allow, a timeout) is counted as unexpected and fails.
 *
 *   k6 run -e BASE_URL=http://127.0.0.1:10000 -e ADMIN_URL=http://127.0.0.1:9090 \
 *          -e ADMIN_TOKEN=... k6/atomicity.js
 *   docker compose --profile load run --rm k6 run /scripts/atomicity.js
 *
 * With ADMIN_TOKEN, setup() creates a new user atom_<random> through POST /admin/users, so its
 * window is empty, and teardown() revokes its sessions and clears its windows. Without ADMIN_TOKEN
 * nothing can be created or reset: the script falls back to alice, and the exact counts hold only
 * if alice sent no general request in the last hour (a fresh store: `docker compose down -v`, then
 * run this before smoke.js or tiers.js). BURST and EXPECTED_ALLOWED (defaults 500 and 100) change
 * the shape for another policy.
 */
import { check } from "k6";
import exec from "k6/execution";
import http from "k6/http";
import { Counter } from "k6/metrics";
import {
  ADMIN_TOKEN,
  ADMIN_URL,
  BASE_URL,
  bearer,
  DEMO_PASSWORD,
  header,
  jsonBody,
  jsonHeaders,
  login,
  randomSuffix,
} from "./lib.js";

const BURST = Number(__ENV.BURST || 500);
const EXPECTED_ALLOWED = Number(__ENV.EXPECTED_ALLOWED || 100);

const allowed = new Counter("allowed");
const rejected = new Counter("rejected");
const unexpected = new Counter("unexpected");
const degraded = new Counter("degraded");

/** @type {import("k6/options").Options} */
export const options = {
  scenarios: {
    burst: {
      executor: "shared-iterations",
      vus: BURST,
      iterations: BURST,
      maxDuration: "60s",
    },
  },
  setupTimeout: "30s",
  thresholds: {
    allowed: [`count==${EXPECTED_ALLOWED}`],
    rejected: [`count==${BURST - EXPECTED_ALLOWED}`],
    unexpected: ["count==0"],
    degraded: ["count==0"],
    checks: ["rate==1.0"],
  },
};

/** @typedef {{ token: string, username: string, userId: string, created: boolean }} SetupData */

/** @returns {SetupData} */
export function setup() {
  // A threshold on a metric that never got a sample is not evaluated the same way across k6
  // versions; a zero sample makes "count==0" mean what it says.
  for (const counter of [allowed, rejected, unexpected, degraded]) counter.add(0);

  if (ADMIN_TOKEN === "") {
    console.warn(
      "ADMIN_TOKEN is not set: using alice, whose general window must be empty for exact counts " +
        "(fresh store, nothing else run in the last hour)",
    );
    const session = login("alice", DEMO_PASSWORD, "k6-atomicity");
    return { token: session.token, username: "alice", userId: session.userId, created: false };
  }

  const username = `atom_${randomSuffix(12)}`;
  const password = `pw-${randomSuffix(16)}-${randomSuffix(16)}`;
  const created = http.post(
    `${ADMIN_URL}/admin/users`,
    JSON.stringify({ username, password, tier: "free" }),
    {
      headers: jsonHeaders(bearer(ADMIN_TOKEN)),
      tags: { name: "POST /admin/users" },
    },
  );
  if (!check(created, { "admin: user created (201)": (r) => r.status === 201 })) {
    exec.test.abort(
      `POST ${ADMIN_URL}/admin/users answered ${created.status}: ${String(created.body).slice(0, 200)}`,
    );
  }
  const session = login(username, password, "k6-atomicity");
  return { token: session.token, username, userId: session.userId, created: true };
}

/** @param {SetupData} data */
export default function (data) {
  const res = http.get(`${BASE_URL}/api/products`, {
    headers: bearer(data.token),
    tags: { name: "GET /api/products (burst)" },
  });
  if (header(res, "X-RateLimit-Degraded") !== undefined) degraded.add(1);
  if (res.status === 200) {
    allowed.add(1);
    check(res, {
      "200 carries X-RateLimit-Remaining": (r) => header(r, "X-RateLimit-Remaining") !== undefined,
    });
  } else if (res.status === 429) {
    rejected.add(1);
    const retryAfter = Number(header(res, "Retry-After"));
    check(res, {
      "429 carries Retry-After >= 1": () => Number.isInteger(retryAfter) && retryAfter >= 1,
      "429 body is rate_limit_exceeded": (r) => jsonBody(r).error === "rate_limit_exceeded",
    });
  } else {
    unexpected.add(1);
    console.error(`unexpected ${res.status} ${res.error || ""} ${String(res.body).slice(0, 200)}`);
  }
}

/** @param {SetupData} data */
export function teardown(data) {
  if (!data.created || ADMIN_TOKEN === "") return;
  // Best effort: leave no live session or full window behind for the throwaway user.
  const headers = bearer(ADMIN_TOKEN);
  const id = encodeURIComponent(data.userId);
  http.post(`${ADMIN_URL}/admin/users/${id}/revoke`, null, { headers, tags: { name: "admin revoke" } });
  http.del(`${ADMIN_URL}/admin/users/${id}/limits`, null, { headers, tags: { name: "admin clear limits" } });
}
