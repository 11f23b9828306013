// The per-address layer in shadow mode (policy `mode: shadow`) only marks a request over it: the
// session, the user and the token are judged, and the enforced layers count and refuse, exactly as
// when the address has room; on Envoy and nginx, memory and Redis, with and without the denial cache.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Tollgate } from "../../src/app.js";
import { createCredentialReader } from "../../src/auth/credentials.js";
import { hashPassword } from "../../src/auth/passwords.js";
import { createChecker } from "../../src/check/checker.js";
import { createDenialCache } from "../../src/check/denial-cache.js";
import { compilePolicy } from "../../src/policy/compile.js";
import { DEFAULT_POLICY_YAML, parsePolicy } from "../../src/policy/policy.js";
import { createMemoryStore, createRedisStore, type Store } from "../../src/store/store.js";
import { type InProcess, startInProcess } from "../support/in-process.js";
import { connectRedis, testPrefix } from "../support/redis.js";

const IP_LIMIT = 2;
const FREE_GENERAL = 5;
const LOGIN_LIMIT = 4;
/** Shadow mode for the address's layer; the anonymous and free tiers enforce their own limits. */
const layeredYaml = (mode: "shadow" | "enforce") =>
  `mode: ${mode}\nip: ${IP_LIMIT}/1m\n${DEFAULT_POLICY_YAML.replace(
    "anonymous:  { general: 100/1h,",
    "anonymous:  { mode: enforce, general: 100/1h,",
  )
    .replace("login: 10/15m", `login: ${LOGIN_LIMIT}/15m`)
    .replace("free:       { general: 100/1h,", `free:       { mode: enforce, general: ${FREE_GENERAL}/1h,`)}`;
const SHADOW = parsePolicy(layeredYaml("shadow"), "shadow policy");
const ENFORCE = parsePolicy(layeredYaml("enforce"), "enforce policy");
const PASSWORD = "correct horse battery";

type Answer = { status: number; headers: Headers };

const STORES: [string, () => Store][] = [
  ["memory", () => createMemoryStore()],
  ["redis", () => createRedisStore({ redis: connectRedis(), prefix: testPrefix() })],
];

let lastIp = 0;
/** An address of its own for each test: the IP layer's window is per address. */
const freshIp = () => `203.0.113.${++lastIp}`;
let lastUser = 0;

describe.each(STORES)("a shadow-mode IP layer on the %s store", (_name, makeStore) => {
  let passwordHash = "";
  beforeAll(async () => {
    passwordHash = await hashPassword(PASSWORD);
  });

  /** A new free user, logged in: its token and who it is. */
  const newUser = async (store: Store, tollgate: Tollgate) => {
    const username = `shadow${++lastUser}`;
    const user = await store.users.create({ username, tier: "free", passwordHash });
    if (user === "exists") throw new Error(`${username} exists`);
    const login = await tollgate.auth.login({
      username,
      password: PASSWORD,
      ip: "192.0.2.1",
      userAgent: "test",
      deviceName: "test",
    });
    if (login.kind !== "ok") throw new Error(`login of ${username} failed: ${login.kind}`);
    return { token: login.token, userId: login.userId, sessionId: login.sessionId };
  };

  describe.each([
    ["with the denial cache", 100_000],
    ["without the denial cache", 0],
  ])("%s", (_cache, denialCacheSize) => {
    let store: Store;
    let running: InProcess;
    let tollgate: Tollgate;
    let checkUrl = "";
    beforeAll(async () => {
      store = makeStore();
      running = await startInProcess({
        store,
        policy: SHADOW,
        demoUsers: false,
        env: { LOG_LEVEL: "silent", DENIAL_CACHE_SIZE: String(denialCacheSize) },
      });
      ({ tollgate, checkUrl } = running);
    });
    afterAll(async () => {
      await running.close();
      await store.close();
    });

    const auth = (token: string | undefined): Record<string, string> =>
      token === undefined ? {} : { authorization: token.includes(" ") ? token : `Bearer ${token}` };
    const envoy = async (
      ip: string,
      token?: string,
      method = "GET",
      path = "/api/products",
    ): Promise<Answer> => {
      const response = await fetch(`${checkUrl}/ext_authz${path}`, {
        method,
        headers: { "x-tollgate-client-ip": ip, ...auth(token) },
      });
      await response.arrayBuffer();
      return { status: response.status, headers: response.headers };
    };
    /** nginx's answer as the client sees it: a rate-limit 403 is nginx's 429. */
    const nginx = async (
      ip: string,
      token?: string,
      method = "GET",
      path = "/api/products",
    ): Promise<Answer> => {
      const response = await fetch(`${checkUrl}/nginx/auth`, {
        headers: {
          "x-original-method": method,
          "x-original-uri": path,
          "x-forwarded-for": ip,
          ...auth(token),
        },
      });
      await response.arrayBuffer();
      const status = Number(response.headers.get("x-authz-status") ?? response.status);
      return { status, headers: response.headers };
    };
    /** Fills the address's layer with requests that pass (they count against the address). */
    const fillAddress = async (ip: string) => {
      const filler = await newUser(store, tollgate);
      for (let i = 0; i < IP_LIMIT; i += 1) {
        const answer = await envoy(ip, filler.token);
        expect(answer.status).toBe(200);
        expect(answer.headers.get("x-ratelimit-shadow")).toBeNull();
      }
    };

    it("answers 401 to a revoked session's token over the address's shadow limit", async () => {
      const ip = freshIp();
      await fillAddress(ip);
      const { token, userId, sessionId } = await newUser(store, tollgate);
      await store.sessions.revoke(userId, sessionId);
      // nginx first: Envoy's 401 may be remembered (a dead session) and nginx's then comes from that.
      const byNginx = await nginx(ip, token);
      expect(byNginx.status).toBe(401);
      expect(byNginx.headers.get("x-user-id")).toBeNull();
      const byEnvoy = await envoy(ip, token);
      expect(byEnvoy.status).toBe(401);
      expect(byEnvoy.headers.get("www-authenticate")).toContain('error="invalid_token"');
    });

    it("answers 401 to a disabled user's token over the address's shadow limit", async () => {
      const ip = freshIp();
      await fillAddress(ip);
      const { token, userId } = await newUser(store, tollgate);
      await store.users.update(userId, { disabled: true });
      for (let i = 0; i < 2; i += 1) {
        expect((await envoy(ip, token)).status).toBe(401);
        expect((await nginx(ip, token)).status).toBe(401);
      }
    });

    it("answers 401 to no token, an invalid token and a non-Bearer header over the address's shadow limit", async () => {
      const ip = freshIp();
      await fillAddress(ip);
      for (const token of [undefined, "not-a-jwt", "Basic YWxpY2U6c2VjcmV0"]) {
        expect((await envoy(ip, token)).status).toBe(401);
        expect((await nginx(ip, token)).status).toBe(401);
      }
    });

    it("passes a valid session over the address's shadow limit with its identity, marked", async () => {
      const ip = freshIp();
      await fillAddress(ip);
      const { token, userId, sessionId } = await newUser(store, tollgate);
      for (const check of [envoy, nginx]) {
        const answer = await check(ip, token);
        expect(answer.status).toBe(200);
        expect(answer.headers.get("x-user-id")).toBe(userId);
        expect(answer.headers.get("x-user-tier")).toBe("free");
        expect(answer.headers.get("x-session-id")).toBe(sessionId);
        expect(answer.headers.get("x-ratelimit-shadow")).toBe("deny");
        expect(answer.headers.get("x-ratelimit-resource")).toBe("ip");
      }
    });

    it("counts a user's requests over the address's shadow limit in the user's own layer, which refuses once full", async () => {
      const ip = freshIp();
      await fillAddress(ip);
      const { token } = await newUser(store, tollgate);
      for (let i = 0; i < FREE_GENERAL; i += 1) {
        const answer = await (i % 2 === 0 ? envoy : nginx)(ip, token);
        expect(answer.status).toBe(200);
        expect(answer.headers.get("x-ratelimit-shadow")).toBe("deny");
      }
      for (const check of [envoy, nginx]) {
        const refused = await check(ip, token);
        expect(refused.status).toBe(429);
        expect(refused.headers.get("x-ratelimit-resource")).toBe("general");
        expect(refused.headers.get("x-ratelimit-limit")).toBe(String(FREE_GENERAL));
      }
    });

    it("counts logins over the address's shadow limit in the enforced login layer, which refuses once full", async () => {
      const ip = freshIp();
      for (let i = 0; i < LOGIN_LIMIT; i += 1) {
        const answer = await (i % 2 === 0 ? envoy : nginx)(ip, undefined, "POST", "/auth/login");
        expect(answer.status).toBe(200);
        expect(answer.headers.get("x-ratelimit-shadow")).toBe(i < IP_LIMIT ? null : "deny");
      }
      for (const check of [envoy, nginx]) {
        const refused = await check(ip, undefined, "POST", "/auth/login");
        expect(refused.status).toBe(429);
        expect(refused.headers.get("x-ratelimit-resource")).toBe("login");
      }
    });
  });

  it("never replays an address's refusal remembered under enforce mode as a pass once the policy turned to shadow", async () => {
    const store = makeStore();
    const running = await startInProcess({
      store,
      policy: ENFORCE,
      demoUsers: false,
      env: { LOG_LEVEL: "silent" },
    });
    try {
      const { tollgate } = running;
      // A checker whose policy turns without the announcement that clears the cache (another
      // instance's reload, the announcement still on its way).
      let compiled = compilePolicy(ENFORCE);
      const check = createChecker({
        policy: () => compiled,
        credentials: createCredentialReader({ tokens: tollgate.tokens, provider: undefined }),

        limiter: store.unguarded.limiter,
        denials: createDenialCache(),
        failureMode: "open",
        timeoutMs: 1_000,
        idleMs: 60_000,
        onStoreError: () => undefined,
        onStoreOk: () => undefined,
      });
      const ip = freshIp();
      const filler = await newUser(store, tollgate);
      const request = (token: string | undefined, method = "GET", path = "/api/products") =>
        check({ method, path, ip, authorization: token === undefined ? undefined : `Bearer ${token}` });
      for (let i = 0; i < IP_LIMIT; i += 1)
        expect(await request(filler.token)).toMatchObject({ kind: "allow" });
      expect(await request(filler.token)).toMatchObject({
        kind: "deny",
        status: 429,
        limit: { category: "ip" },
      });

      compiled = compilePolicy(SHADOW);
      const revoked = await newUser(store, tollgate);
      await store.sessions.revoke(revoked.userId, revoked.sessionId);
      expect(await request(revoked.token)).toMatchObject({ kind: "deny", status: 401, reason: "revoked" });
      const valid = await newUser(store, tollgate);
      expect(await request(valid.token)).toMatchObject({
        kind: "allow",
        identity: { userId: valid.userId },
        limit: { category: "ip", shadow: true },
      });
      // An anonymous login is counted in its own enforced layer, however often the address refused.
      for (let i = 0; i < LOGIN_LIMIT; i += 1) {
        expect(await request(undefined, "POST", "/auth/login")).toMatchObject({ kind: "allow" });
      }
      expect(await request(undefined, "POST", "/auth/login")).toMatchObject({
        kind: "deny",
        status: 429,
        limit: { category: "login" },
      });
    } finally {
      await running.close();
      await store.close();
    }
  });
});
