// @ts-check
/**
 * Latency under steady load: a constant arrival rate of GET /api/products as the enterprise user
 * ent_carol (10000 general requests per hour), through the proxy, so every request pays for one
 * ext_authz check plus the upstream. Fails if p99 latency reaches 50 ms or more than 1% of requests
 * fail. A 429 counts as an expected answer, not a failure: once ent_carol's hour is used up the
 * limiter is doing its job (the default 200/s for 30 s is 6000 requests, so a second run within the
 * hour starts meeting 429s; the rate_limited counter shows how many).
 *
 *   k6 run -e BASE_URL=http://127.0.0.1:10000 -e RATE=200 -e DURATION=30s k6/load.js
 *   docker compose --profile load run --rm k6 run /scripts/load.js
 *
 * Note that k6 on the same machine as the stack competes with it for CPU.
 */
import { check } from "k6";
import http from "k6/http";
import { Counter } from "k6/metrics";
import { BASE_URL, bearer, DEMO_PASSWORD, login } from "./lib.js";

const RATE = Number(__ENV.RATE || 200);
const DURATION = __ENV.DURATION || "30s";

const rateLimited = new Counter("rate_limited");

http.setResponseCallback(http.expectedStatuses({ min: 200, max: 299 }, 429));

/** @type {import("k6/options").Options} */
export const options = {
  scenarios: {
    products: {
      executor: "constant-arrival-rate",
      rate: RATE,
      timeUnit: "1s",
      duration: DURATION,
      preAllocatedVUs: Math.max(10, Math.ceil(RATE / 4)),
      maxVUs: Math.max(50, RATE * 2),
    },
  },
  thresholds: {
    http_req_duration: ["p(99)<50"],
    http_req_failed: ["rate<0.01"],
    checks: ["rate>0.99"],
  },
};

/** @returns {{ token: string }} */
export function setup() {
  return { token: login("ent_carol", DEMO_PASSWORD, "k6-load").token };
}

/** @param {{ token: string }} data */
export default function (data) {
  const res = http.get(`${BASE_URL}/api/products`, {
    headers: bearer(data.token),
    tags: { name: "GET /api/products" },
  });
  if (res.status === 429) rateLimited.add(1);
  check(res, { "200 or 429": (r) => r.status === 200 || r.status === 429 });
}
