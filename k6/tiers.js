// @ts-check
/**
 * Tier limits as the client sees them: logs in as alice (free), bob_pro (pro) and ent_carol
 * (enterprise) and checks X-RateLimit-Limit and X-RateLimit-Resource on one request per category:
 * general (GET /api/products), search (GET /api/search) and orders (POST /api/orders).
 *
 *   k6 run -e BASE_URL=http://127.0.0.1:10000 k6/tiers.js
 *   docker compose --profile load run --rm k6 run /scripts/tiers.js
 *
 * Costs: three logins from this IP (the anonymous login limit is 10 per 15 minutes) and one
 * request per category per user; a user whose window is already full answers 429, which fails.
 */
import { check, group } from "k6";
import http from "k6/http";
import { BASE_URL, bearer, DEMO_PASSWORD, header, headerNumber, jsonHeaders, login } from "./lib.js";

/** @type {Array<{ username: string, tier: string, limits: { general: number, search: number, orders: number } }>} */
const USERS = [
  { username: "alice", tier: "free", limits: { general: 100, search: 20, orders: 10 } },
  { username: "bob_pro", tier: "pro", limits: { general: 1000, search: 200, orders: 100 } },
  { username: "ent_carol", tier: "enterprise", limits: { general: 10000, search: 2000, orders: 1000 } },
];

/** @type {import("k6/options").Options} */
export const options = {
  vus: 1,
  iterations: 1,
  thresholds: {
    checks: ["rate==1.0"],
  },
};

/**
 * @param {import("k6/http").Response} res @param {string} label
 * @param {number} expectedStatus @param {string} tier @param {string} category @param {number} limit
 */
function checkLimited(res, label, expectedStatus, tier, category, limit) {
  const remaining = headerNumber(res, "X-RateLimit-Remaining");
  check(res, {
    [`${label}: ${expectedStatus}`]: (r) => r.status === expectedStatus,
    [`${label}: X-RateLimit-Limit ${limit}`]: () => headerNumber(res, "X-RateLimit-Limit") === limit,
    [`${label}: X-RateLimit-Remaining below the limit`]: () =>
      Number.isInteger(remaining) && remaining >= 0 && remaining < limit,
    [`${label}: X-RateLimit-Resource ${category}`]: (r) => header(r, "X-RateLimit-Resource") === category,
    [`${label}: RateLimit-Policy ${tier}-${category}`]: (r) =>
      (header(r, "RateLimit-Policy") || "").startsWith(`"${tier}-${category}";q=${limit};`),
  });
}

export default function () {
  for (const user of USERS) {
    group(user.username, () => {
      const session = login(user.username, DEMO_PASSWORD, "k6-tiers");
      check(session, { [`${user.username}: tier ${user.tier}`]: (s) => s.tier === user.tier });
      const auth = bearer(session.token);

      const general = http.get(`${BASE_URL}/api/products`, {
        headers: auth,
        tags: { name: "GET /api/products" },
      });
      checkLimited(general, `${user.username} general`, 200, user.tier, "general", user.limits.general);

      const search = http.get(`${BASE_URL}/api/search?q=lamp`, {
        headers: auth,
        tags: { name: "GET /api/search" },
      });
      checkLimited(search, `${user.username} search`, 200, user.tier, "search", user.limits.search);

      const order = http.post(
        `${BASE_URL}/api/orders`,
        JSON.stringify({ items: [{ product_id: 1, quantity: 1 }] }),
        { headers: jsonHeaders(auth), tags: { name: "POST /api/orders" } },
      );
      checkLimited(order, `${user.username} orders`, 201, user.tier, "orders", user.limits.orders);
    });
  }
}
