// A refusal by the client address's layer (policy `ip:`) is the address's: it names the layer and the
// requester's own tier, never another identity, cached or not, on Envoy and nginx, memory and Redis.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DEFAULT_POLICY_YAML, parsePolicy } from "../../src/policy/policy.js";
import { createMemoryStore, createRedisStore, type Store } from "../../src/store/store.js";
import { demoToken, type InProcess, startInProcess } from "../support/in-process.js";
import { connectRedis, testPrefix } from "../support/redis.js";

const IP_LIMIT = 3;
const POLICY = parsePolicy(`${DEFAULT_POLICY_YAML}ip: ${IP_LIMIT}/1m\n`, "test policy");
const IP_POLICY_HEADER = `"ip";q=${IP_LIMIT};w=60`;

type Answer = { status: number; headers: Headers; body: Record<string, unknown> };

const start = (store: Store, denialCacheSize: number): Promise<InProcess> =>
  startInProcess({
    store,
    policy: POLICY,
    env: { LOG_LEVEL: "silent", DENIAL_CACHE_SIZE: String(denialCacheSize) },
  });

const STORES: [string, () => Store][] = [
  ["memory", () => createMemoryStore()],
  ["redis", () => createRedisStore({ redis: connectRedis(), prefix: testPrefix() })],
];

let lastIp = 0;
/** An address of its own for each test: the IP layer's window is per address. */
const freshIp = () => `203.0.113.${++lastIp}`;

describe.each(STORES)("IP-layer refusals on the %s store", (_name, makeStore) => {
  describe.each([
    ["with the denial cache", 100_000],
    ["without the denial cache", 0],
  ])("%s", (_cache, denialCacheSize) => {
    let t: InProcess;
    let carol = ""; // enterprise
    let alice = ""; // free
    beforeAll(async () => {
      t = await start(makeStore(), denialCacheSize);
      carol = await demoToken(t.tollgate.auth, "ent_carol");
      alice = await demoToken(t.tollgate.auth, "alice");
    });
    afterAll(async () => {
      await t.close();
      await t.store.close();
    });

    const answer = async (response: Response): Promise<Answer> => {
      const text = await response.text();
      return {
        status: response.status,
        headers: response.headers,
        body: text === "" ? {} : JSON.parse(text),
      };
    };
    const envoy = async (ip: string, token?: string, path = "/api/products"): Promise<Answer> =>
      answer(
        await fetch(`${t.checkUrl}/ext_authz${path}`, {
          headers: {
            "x-tollgate-client-ip": ip,
            ...(token === undefined ? {} : { authorization: `Bearer ${token}` }),
          },
        }),
      );
    /** nginx's answer, with the JSON body nginx sends from X-Authz-Body. */
    const nginx = async (ip: string, token?: string, path = "/api/products"): Promise<Answer> => {
      const response = await fetch(`${t.checkUrl}/nginx/auth`, {
        headers: {
          "x-original-method": "GET",
          "x-original-uri": path,
          "x-forwarded-for": ip,
          ...(token === undefined ? {} : { authorization: `Bearer ${token}` }),
        },
      });
      expect(response.status).toBe(403);
      expect(response.headers.get("x-authz-status")).toBe("429");
      return {
        status: 429,
        headers: response.headers,
        body: JSON.parse(response.headers.get("x-authz-body") ?? ""),
      };
    };
    /** Requests without a token count against the address too (then answer 401) until it is full. */
    const fillAnonymously = async (ip: string) => {
      for (let i = 0; i < IP_LIMIT; i += 1) expect((await envoy(ip, undefined)).status).toBe(401);
    };
    /** What an address-layer 429 must say to a requester of `tier`. */
    const ipRefusal = (tier: string) => ({
      error: "rate_limit_exceeded",
      category: "ip",
      tier,
      limit: IP_LIMIT,
      window_seconds: 60,
    });

    it("tells a user refused by an address another user filled the layer and the user's own tier", async () => {
      const ip = freshIp();
      for (let i = 0; i < IP_LIMIT; i += 1) expect((await envoy(ip, carol)).status).toBe(200);
      const carols = await envoy(ip, carol);
      expect(carols.status).toBe(429);
      expect(carols.body).toMatchObject(ipRefusal("enterprise"));
      // Twice each: the second may come from the cache, and must read the same.
      for (let i = 0; i < 2; i += 1) {
        const refused = await envoy(ip, alice);
        expect(refused.status).toBe(429);
        expect(refused.body).toMatchObject(ipRefusal("free"));
        expect(refused.headers.get("x-ratelimit-resource")).toBe("ip");
        expect(refused.headers.get("ratelimit-policy")).toBe(IP_POLICY_HEADER);
        expect((await nginx(ip, alice)).body).toMatchObject(ipRefusal("free"));
      }
      // The decision behind it carries no identity: the address refused, not Carol's account.
      const decision = await t.tollgate.checker({
        method: "GET",
        path: "/api/products",
        authorization: `Bearer ${alice}`,
        ip,
      });
      expect(decision).toMatchObject({
        kind: "deny",
        status: 429,
        identity: undefined,
        limit: { tier: "free" },
      });
    });

    it("tells an anonymous client refused by an address a user filled the anonymous tier and both layers", async () => {
      const ip = freshIp();
      for (let i = 0; i < IP_LIMIT; i += 1) expect((await envoy(ip, carol)).status).toBe(200);
      expect((await envoy(ip, carol)).status).toBe(429);
      for (let i = 0; i < 2; i += 1) {
        const refused = await envoy(ip, undefined);
        expect(refused.status).toBe(429);
        expect(refused.body).toMatchObject(ipRefusal("anonymous"));
        expect(refused.headers.get("ratelimit-policy")).toBe(
          `${IP_POLICY_HEADER}, "anonymous-general";q=100;w=3600`,
        );
        expect((await nginx(ip, undefined)).body).toMatchObject(ipRefusal("anonymous"));
      }
    });

    it("tells a user refused by an address anonymous clients filled the user's own tier", async () => {
      const ip = freshIp();
      await fillAnonymously(ip);
      expect((await envoy(ip, undefined)).body).toMatchObject(ipRefusal("anonymous"));
      for (let i = 0; i < 2; i += 1) {
        const refused = await envoy(ip, alice);
        expect(refused.body).toMatchObject(ipRefusal("free"));
        expect(refused.headers.get("ratelimit-policy")).toBe(IP_POLICY_HEADER);
        expect((await nginx(ip, carol)).body).toMatchObject(ipRefusal("enterprise"));
      }
    });
  });
});
