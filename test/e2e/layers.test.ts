// Layered limits end to end, through real nginx and the Envoy harness on a real Redis: windows in a
// list, the per-address layer for anonymous and authenticated floods, each algorithm, the account
// category that a spent general quota never blocks.
import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { EnvoyHarness } from "../support/envoy-harness.js";
import { type Reply, send } from "../support/http-client.mjs";
import { loopbackAddresses } from "../support/ports.js";
import type { Nginx, TollgateProcess } from "../support/processes.mjs";
import { type Stack, startStack } from "../support/stack.js";

const PASSWORD = "layers-test-password";
const POLICY = `
ip: 40/1m
tiers:
  anonymous:  { general: 1000/1h, search: 1000/1h, orders: 1000/1h, login: 1000/15m, account: 1000/1h }
  free:       { general: [5/1s, 100/1h], search: { limit: 5/1s, algorithm: gcra }, orders: { limit: 3/1m, algorithm: sliding-counter }, account: 300/1h }
  pro:        { general: 1000/1h, search: 200/1h, orders: 100/1h, account: 300/1h }
  enterprise: { general: 10000/1h, search: 2000/1h, orders: 1000/1h, account: 300/1h }
routes:
  - { method: GET,  path: /api/products, category: general }
  - { method: GET,  path: /api/search,   category: search }
  - { method: POST, path: /api/orders,   category: orders }
  - { method: POST, path: /auth/login,   category: login, token: none }
  - { path: /auth/logout,     category: account }
  - { path: /auth/logout-all, category: account }
  - { path: /auth/sessions/*, category: account }
  - { path: /me,              category: account }
  - { path: /health, token: none, limit: false }
  - { path: /ready,  token: none, limit: false }
default: { category: general, token: required }
`;

let tollgate: TollgateProcess;
let nginx: Nginx;
let envoy: EnvoyHarness;
let stack: Stack;

/** Every test and proxy takes loopback source addresses of its own: the IP layer keys by them. */
const newAddress = loopbackAddresses(40);

beforeAll(async () => {
  stack = await startStack({ policy: POLICY });
  ({ tollgate, nginx, envoy } = stack);
});

afterAll(() => stack?.stop());

async function freshUser(tier = "free"): Promise<string> {
  const username = `layers_${randomBytes(5).toString("hex")}`;
  const created = await send(`${tollgate.adminUrl}/admin/users`, {
    method: "POST",
    headers: { authorization: `Bearer ${tollgate.adminToken}` },
    body: { username, password: PASSWORD, tier },
  });
  expect(created.status, created.text).toBe(201);
  const res = await send(`${tollgate.url}/auth/login`, {
    method: "POST",
    body: { username, password: PASSWORD },
  });
  expect(res.status, res.text).toBe(200);
  return res.json<{ access_token: string }>().access_token;
}

const proxies: Array<[string, () => string]> = [
  ["nginx", () => nginx.url],
  ["the Envoy harness", () => envoy.url],
];

describe.each(proxies)("through %s", (_name, base) => {
  const get = (path: string, token: string | undefined, address: string) =>
    send(`${base()}${path}`, {
      headers: token === undefined ? {} : { authorization: `Bearer ${token}` },
      localAddress: address,
    });

  it("lets a layered free user make 5 requests in a second; the 6th is 429 with Retry-After: 1", async () => {
    const token = await freshUser();
    const address = newAddress();
    // At once, so that a loaded machine cannot spread them over more than the second.
    const replies = await Promise.all(Array.from({ length: 6 }, () => get("/api/products", token, address)));
    const allowed = replies.filter((r) => r.status === 200);
    const denied = replies.filter((r) => r.status === 429);
    expect([allowed.length, denied.length]).toEqual([5, 1]);
    // Each answer describes the window closest to refusing: the second's, down to 0.
    expect(allowed.map((r) => r.header("x-ratelimit-remaining")).sort()).toEqual(["0", "1", "2", "3", "4"]);
    const first = allowed.find((r) => r.header("x-ratelimit-remaining") === "4") as Reply;
    expect(first.header("x-ratelimit-limit")).toBe("5");
    expect(first.header("ratelimit-policy")).toBe(
      '"ip";q=40;w=60, "free-general";q=5;w=1, "free-general-1h";q=100;w=3600',
    );
    expect(first.header("ratelimit")).toMatch(/^"free-general";r=4;t=1$/);
    const refused = denied[0] as Reply;
    expect(refused.header("retry-after")).toBe("1");
    expect(refused.json()).toMatchObject({
      error: "rate_limit_exceeded",
      category: "general",
      limit: 5,
      window_seconds: 1,
    });
    // The hour's window counted the five, not the refused sixth.
    await new Promise((r) => setTimeout(r, 1_100));
    const after = await get("/api/products", token, address);
    expect(after.status).toBe(200);
    expect(after.header("x-ratelimit-remaining")).toBe("4");
  });

  it("refuses a flood from one address, anonymous and authenticated alike, past its IP layer", async () => {
    const address = newAddress();
    const tokens = await Promise.all([1, 2, 3, 4, 5].map(() => freshUser("pro")));
    // 25 anonymous requests (each 401 once the layers let it through) and 25 from five users.
    const requests = [
      ...Array.from({ length: 25 }, () => () => get("/api/products", undefined, address)),
      ...tokens.flatMap((token) =>
        Array.from({ length: 5 }, () => () => get("/api/products", token, address)),
      ),
    ];
    const replies = await Promise.all(requests.map((r) => r()));
    const refused = replies.filter((r) => r.status === 429);
    expect(replies.filter((r) => r.status === 200 || r.status === 401)).toHaveLength(40);
    expect(refused).toHaveLength(10);
    for (const r of refused) {
      expect(r.header("x-ratelimit-resource")).toBe("ip");
      expect(r.json()).toMatchObject({ category: "ip", limit: 40, window_seconds: 60 });
      expect(Number(r.header("retry-after"))).toBeGreaterThan(50);
    }
    // Another address is not affected.
    expect((await get("/api/products", tokens[0], newAddress())).status).toBe(200);
  });

  it("counts gcra and sliding-counter categories with their own Retry-After", async () => {
    const token = await freshUser();
    const address = newAddress();
    // gcra 5/1s: a burst of five, then one every 200 ms.
    const searches = await Promise.all(
      Array.from({ length: 6 }, () => get("/api/search?q=lamp", token, address)),
    );
    expect(searches.map((r) => r.status).sort()).toEqual([200, 200, 200, 200, 200, 429]);
    expect(searches.find((r) => r.status === 429)?.header("retry-after")).toBe("1");
    await new Promise((r) => setTimeout(r, 250));
    expect((await get("/api/search?q=lamp", token, address)).status).toBe(200);
    // sliding-counter 3/1m on orders.
    const order = () =>
      send(`${base()}/api/orders`, {
        method: "POST",
        headers: { authorization: `Bearer ${token}` },
        body: { items: [{ product_id: 1, quantity: 1 }] },
        localAddress: address,
      });
    const orders: Reply[] = [];
    for (let i = 0; i < 4; i += 1) orders.push(await order());
    expect(orders.map((r) => r.status)).toEqual([201, 201, 201, 429]);
    expect(orders[3]?.json()).toMatchObject({ category: "orders", limit: 3, window_seconds: 60 });
  });

  it("lets a user whose general quota is spent log out and list their sessions (account category)", async () => {
    const token = await freshUser();
    const address = newAddress();
    for (let i = 0; i < 5; i += 1) await get("/api/products", token, address);
    expect((await get("/api/products", token, address)).status).toBe(429);
    const sessions = await get("/auth/sessions", token, address);
    expect(sessions.status, sessions.text).toBe(200);
    // Counted as account (the header describes the IP layer here: it has less room left).
    expect(sessions.header("ratelimit-policy")).toContain('"free-account";q=300;w=3600');
    expect((await get("/me", token, address)).status).toBe(200);
    const logout = await send(`${base()}/auth/logout`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}` },
      localAddress: address,
    });
    expect(logout.status, logout.text).toBe(200);
    expect((await get("/api/products", token, address)).status).toBe(401);
  });
});
