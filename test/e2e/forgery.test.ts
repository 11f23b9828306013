// Forged identity and client-address headers through real nginx and the Envoy harness: none takes effect.
import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DEFAULT_POLICY_YAML } from "../../src/policy/policy.js";
import type { EnvoyHarness } from "../support/envoy-harness.js";
import { type Reply, send } from "../support/http-client.mjs";
import { loopbackAddresses } from "../support/ports.js";
import type { Nginx, TollgateProcess, UpstreamProcess } from "../support/processes.mjs";
import { type Stack, startStack } from "../support/stack.js";

const PASSWORD = "forgery-test-password";
const FORGED_IDENTITY = { "x-user-id": "demo-carol", "x-user-tier": "enterprise", "x-session-id": "forged" };

let tollgate: TollgateProcess;
let upstream: UpstreamProcess;
let nginx: Nginx;
let envoy: EnvoyHarness;
let stack: Stack;

/** Every proxy sees its clients on loopback: each test takes source addresses of its own. */
const newAddress = loopbackAddresses(10);

beforeAll(async () => {
  // The default policy, except that GET /api/search takes no token: an anonymous request that the
  // check ALLOWS reaches the upstream, which is where a forged identity would do harm.
  const policy = DEFAULT_POLICY_YAML.replace(
    "path: /api/search,   category: search }",
    "path: /api/search,   category: search, token: none }",
  );
  expect(policy).toContain("category: search, token: none");
  stack = await startStack({ policy });
  ({ tollgate, upstream, nginx, envoy } = stack);
});

afterAll(() => stack?.stop());

async function freshUser(): Promise<{ token: string; userId: string }> {
  const username = `forgery_${randomBytes(5).toString("hex")}`;
  const created = await send(`${tollgate.adminUrl}/admin/users`, {
    method: "POST",
    headers: { authorization: `Bearer ${tollgate.adminToken}` },
    body: { username, password: PASSWORD, tier: "free" },
  });
  expect(created.status, created.text).toBe(201);
  const res = await send(`${tollgate.url}/auth/login`, {
    method: "POST",
    body: { username, password: PASSWORD },
  });
  expect(res.status, res.text).toBe(200);
  const body = res.json<{ access_token: string; user_id: string }>();
  return { token: body.access_token, userId: body.user_id };
}

const userOf = (reply: Reply) => reply.json<{ user?: { id: string; tier: string | null } }>().user;

describe("the demo upstream", () => {
  it("trusts x-user-id when reached directly, so a header that leaked through a proxy would show", async () => {
    const direct = await send(`${upstream.url}/api/products`, { headers: FORGED_IDENTITY });
    expect(direct.status).toBe(200);
    expect(userOf(direct)).toEqual({ id: "demo-carol", tier: "enterprise" });
  });
});

const proxies = (): Array<[string, string]> => [
  ["nginx", nginx.url],
  ["the Envoy harness", envoy.url],
];

describe.each(["nginx", "the Envoy harness"])("identity headers forged through %s", (name) => {
  const base = (): string => (proxies().find(([n]) => n === name) as [string, string])[1];

  it("replaces a forged identity with the token's on an authenticated request", async () => {
    const user = await freshUser();
    const address = newAddress();
    const spellings: Array<Record<string, string | string[]>> = [
      FORGED_IDENTITY,
      { "X-User-Id": "demo-carol", "X-User-Tier": "enterprise", "X-Session-Id": "forged" },
      { "x-user-id": ["demo-carol", "demo-bob"], "x-user-tier": ["enterprise", "pro"] },
    ];
    for (const forged of spellings) {
      const res = await send(`${base()}/api/products`, {
        headers: { authorization: `Bearer ${user.token}`, ...forged },
        localAddress: address,
      });
      expect(res.status, res.text).toBe(200);
      expect(userOf(res)).toEqual({ id: user.userId, tier: "free" });
    }
  });

  it("sends no identity at all upstream for an allowed anonymous request", async () => {
    const res = await send(`${base()}/api/search?q=lamp`, {
      headers: FORGED_IDENTITY,
      localAddress: newAddress(),
    });
    // The check allowed it (no token needed); the upstream then found no x-user-id and refused.
    expect(res.status, res.text).toBe(401);
    expect(res.json()).toMatchObject({ error: "unauthorized" });
    expect(res.text).not.toContain("demo-carol");
  });

  it("refuses a forged identity without a token on a route that needs one", async () => {
    const res = await send(`${base()}/api/products`, {
      headers: FORGED_IDENTITY,
      localAddress: newAddress(),
    });
    expect(res.status).toBe(401);
    expect(res.json()).toEqual({ error: "unauthorized", message: "Authentication required" });
  });

  it("ignores a forged X-Original-URI, X-Original-Method or X-Authz-Status", async () => {
    const res = await send(`${base()}/api/products`, {
      headers: {
        ...FORGED_IDENTITY,
        "x-original-uri": "/health",
        "x-original-method": "GET",
        "x-authz-status": "200",
      },
      localAddress: newAddress(),
    });
    expect(res.status).toBe(401);
  });
});

describe.each(["nginx", "the Envoy harness"])("path tricks through %s", (name) => {
  const base = (): string => (proxies().find(([n]) => n === name) as [string, string])[1];
  const tricks = [
    "/health/../api/products",
    "/health/..%2Fapi/products",
    "/health%2F..%2Fapi%2Fproducts",
    "/ready/..;/api/products",
    "/auth/login/../../api/products",
    "/api/%2e%2e/health/../api/products",
    "/api/./products",
    "/api//products",
    "//api/products",
    "/%61pi/products",
    "/API/products",
    "/Health/../api/products",
    "/api/products?x=/health",
    "/api/products#/health",
    "/api/products%00",
    "/api/products%20",
    "/api/products/",
    "/api/orders/..%5C..%5Chealth",
  ];

  it("never gets a token-less request past the check to the upstream", async () => {
    const address = newAddress();
    for (const path of tricks) {
      for (const method of ["GET", "HEAD", "POST"]) {
        const res = await send(`${base()}${path}`, {
          method,
          headers: FORGED_IDENTITY,
          localAddress: address,
        });
        const what = `${method} ${path}: ${res.status} ${res.text.slice(0, 200)}`;
        expect([400, 401, 404, 429], what).toContain(res.status);
        // The upstream's own refusal would mean the check let the request through.
        expect(res.text, what).not.toContain("x-user-id");
        expect(res.text, what).not.toContain("products");
      }
    }
  });
});

/** Ten logins pass the per-IP limit (10 per 15 min); an empty body is refused cheaply with 400. */
async function loginAttempts(
  url: string,
  address: string,
  headersFor: (i: number) => Record<string, string>,
): Promise<number[]> {
  const statuses: number[] = [];
  for (let i = 0; i < 11; i += 1) {
    const res = await send(`${url}/auth/login`, {
      method: "POST",
      body: {},
      headers: headersFor(i),
      localAddress: address,
    });
    statuses.push(res.status);
  }
  return statuses;
}

const FORGED_ADDRESS_HEADERS = (i: number): Record<string, string> => ({
  "x-forwarded-for": `203.0.113.${i + 1}, 198.51.100.${i + 1}`,
  "x-real-ip": `203.0.113.${i + 1}`,
  forwarded: `for=203.0.113.${i + 1}`,
  "x-tollgate-client-ip": `192.0.2.${i + 1}`,
  "true-client-ip": `192.0.2.${i + 1}`,
});

describe.each(["nginx", "the Envoy harness"])("client addresses forged through %s", (name) => {
  const base = (): string => (proxies().find(([n]) => n === name) as [string, string])[1];

  it("keeps one login limit per connection address whatever X-Forwarded-For and friends say", async () => {
    const address = newAddress();
    const statuses = await loginAttempts(`${base()}`, address, FORGED_ADDRESS_HEADERS);
    expect(statuses.slice(0, 10)).toEqual(Array(10).fill(400));
    expect(statuses[10]).toBe(429);
    // Another connection address has its own, untouched limit.
    const other = await send(`${base()}/auth/login`, {
      method: "POST",
      body: {},
      localAddress: newAddress(),
    });
    expect(other.status).toBe(400);
  });

  it("does not let a client spend another address's limit by naming it in X-Forwarded-For", async () => {
    const victim = newAddress();
    const attacker = newAddress();
    const spent = await loginAttempts(base(), attacker, () => ({
      "x-forwarded-for": victim,
      "x-tollgate-client-ip": victim,
    }));
    expect(spent[10]).toBe(429);
    const res = await send(`${base()}/auth/login`, { method: "POST", body: {}, localAddress: victim });
    expect(res.status).toBe(400);
  });
});

describe("IPv6 clients on the check listener (the address a trusted proxy forwards)", () => {
  /** One anonymous login check from `ip`, sent as nginx or Envoy would send it. */
  async function loginCheck(protocol: "nginx" | "envoy", ip: string): Promise<number> {
    const res =
      protocol === "nginx"
        ? await send(`${tollgate.checkUrl}/nginx/auth`, {
            headers: {
              "x-original-method": "POST",
              "x-original-uri": "/auth/login",
              "x-forwarded-for": `2001:db8:ffff::1, ${ip}`,
            },
          })
        : await send(`${tollgate.checkUrl}/ext_authz/auth/login`, {
            method: "POST",
            headers: { "x-tollgate-client-ip": ip, "x-forwarded-for": `${ip}, 10.89.0.10` },
          });
    if (protocol === "nginx" && res.status === 403) return Number(res.header("x-authz-status"));
    return res.status;
  }

  it.each(["nginx", "envoy"] as const)(
    "shares one login limit across a /64 and not beyond it (%s)",
    async (protocol) => {
      const net = protocol === "nginx" ? "2001:db8:1:2" : "2001:db8:3:4";
      const sameNet = [
        `${net}::1`,
        `${net}::2`,
        `${net}:0:0:0:ff`,
        `${net}:dead:beef:1:2`,
        `${net.toUpperCase()}::ABCD`,
        `[${net}::3]`,
        `${net}:ffff:ffff:ffff:fffe`,
        `${net}::4%eth0`,
        `${net}:1::1`,
        `${net}::5`,
      ];
      const statuses: number[] = [];
      for (const ip of sameNet) statuses.push(await loginCheck(protocol, ip));
      expect(statuses).toEqual(Array(10).fill(200));
      expect(await loginCheck(protocol, `${net}:ffff:ffff:ffff:ffff`)).toBe(429);
      // The next /64 is another client.
      const [a, b, c, d] = net.split(":");
      expect(await loginCheck(protocol, `${a}:${b}:${c}:${Number.parseInt(d as string, 16) + 1}::1`)).toBe(
        200,
      );
    },
  );

  it("treats an IPv4-mapped IPv6 address as the IPv4 client it is", async () => {
    const statuses: number[] = [];
    for (let i = 0; i < 5; i += 1) statuses.push(await loginCheck("nginx", "192.0.2.200"));
    for (let i = 0; i < 5; i += 1) statuses.push(await loginCheck("envoy", "::ffff:192.0.2.200"));
    expect(statuses).toEqual(Array(10).fill(200));
    expect(await loginCheck("nginx", "::ffff:c000:2c8")).toBe(429);
  });

  // A translator (SIIT-DC, a NAT46 load balancer such as Cilium's) hands an IPv6-only proxy its
  // IPv4 clients as 64:ff9b::<IPv4>: one /64 for every IPv4 client on the internet, so that one
  // client's ten logins locked all of them out.
  it.each(["nginx", "envoy"] as const)(
    "keeps IPv4 clients that a NAT64 translator forwards (64:ff9b::/96) apart, each as its IPv4 address (%s)",
    async (protocol) => {
      const [client, other] =
        protocol === "nginx" ? ["192.0.2.210", "192.0.2.211"] : ["192.0.2.220", "192.0.2.221"];
      const statuses: number[] = [];
      for (let i = 0; i < 5; i += 1) statuses.push(await loginCheck(protocol, `64:ff9b::${client}`));
      for (let i = 0; i < 5; i += 1) statuses.push(await loginCheck(protocol, client));
      expect(statuses).toEqual(Array(10).fill(200));
      expect(await loginCheck(protocol, `64:ff9b::${client}`)).toBe(429);
      expect(await loginCheck(protocol, `64:ff9b::${other}`)).toBe(200);
    },
  );
});
