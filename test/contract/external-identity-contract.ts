// The contract of identities from outside tollgate: provider tokens (verified against the tests' own
// JWKS server) and API keys, through the HTTP check and the admin API, run unchanged against the
// memory and Redis stores.
import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { newApiKey } from "../../src/auth/api-keys.js";
import type { ApiKey } from "../../src/auth/subjects.js";
import { DEFAULT_POLICY_YAML, parsePolicy } from "../../src/policy/policy.js";
import { StoreUnavailableError } from "../../src/store/failure.js";
import type { Store } from "../../src/store/store.js";
import { type InProcess, startInProcess } from "../support/in-process.js";
import {
  type JwksServer,
  makeKey,
  publicPem,
  signHs256,
  signToken,
  startJwksServer,
  type TestKey,
  unsigned,
} from "../support/jwks-server.js";
import { rawRequest } from "../support/raw-http.js";

const AUDIENCE = "api://tollgate-contract";
const KEY_SHAPE = /^tg_[0-9a-f]{16}_[A-Za-z0-9_-]{43}$/;

type Answer = { status: number; headers: Headers; body: string };
type KeyBody = {
  id: string;
  key: string;
  name: string;
  tier: string;
  user_id: string | null;
  last_used_at: string | null;
};

export function describeExternalIdentityContract(
  name: string,
  makeStore: () => Store | Promise<Store>,
): void {
  describe(`external identity contract: ${name}`, () => {
    let idp: JwksServer;
    let rsa: TestKey;
    let ec: TestKey;
    let running: InProcess;
    let ipCount = 0;

    beforeAll(async () => {
      rsa = makeKey("rsa-1", "RS256");
      ec = makeKey("ec-1", "ES256");
      idp = await startJwksServer([rsa, ec]);
      running = await startInProcess({
        store: await makeStore(),
        env: {
          LOG_LEVEL: "info",
          JWKS_URL: idp.jwksUrl,
          JWT_ISSUER: idp.issuer,
          JWT_AUDIENCE: AUDIENCE,
          JWT_TIER_CLAIM: "plan",
          JWT_TIER_MAP: "basic=free,premium=pro",
          EXTERNAL_DEFAULT_TIER: "free",
        },
      });
      await running.tollgate.providerKeys?.ready();
    });
    afterAll(async () => {
      await running?.close();
      await idp?.close();
    });

    const check = async (headers: Record<string, string>, path = "/api/search"): Promise<Answer> => {
      ipCount += 1;
      const res = await fetch(`${running.checkUrl}/ext_authz${path}`, {
        headers: { "x-forwarded-for": `198.18.${ipCount >> 8}.${ipCount & 255}`, ...headers },
      });
      return { status: res.status, headers: res.headers, body: await res.text() };
    };
    const bearer = (token: string) => check({ authorization: `Bearer ${token}` });
    const adminCall = <T>(method: string, path: string, json?: unknown) =>
      running.admin<T>(method, path, { token: running.adminToken, ...(json === undefined ? {} : { json }) });
    const claims = (extra: Record<string, unknown> = {}) => {
      const now = Math.floor(Date.now() / 1000);
      return {
        iss: idp.issuer,
        aud: AUDIENCE,
        sub: `auth0|${randomBytes(6).toString("hex")}`,
        iat: now,
        exp: now + 300,
        ...extra,
      };
    };

    describe("provider tokens", () => {
      it("allows an RS256 token, naming its subject and the tier its plan claim maps to", async () => {
        const c = claims({ plan: "premium" });
        const answer = await bearer(signToken(rsa, c));
        expect(answer.status, answer.body).toBe(200);
        expect(answer.headers.get("x-user-id")).toBe(`ext:${c.sub}`);
        expect(answer.headers.get("x-user-tier")).toBe("pro");
        expect(answer.headers.get("x-session-id")).toBe("");
        expect(answer.headers.get("x-ratelimit-limit")).toBe("200");
      });

      it("names a provider subject upstream apart from local users and keys, whatever it is", async () => {
        for (const sub of ["demo-alice", "key:0123456789abcdef"]) {
          const answer = await bearer(signToken(rsa, claims({ sub })));
          expect(answer.status, answer.body).toBe(200);
          expect(answer.headers.get("x-user-id")).toBe(`ext:${sub}`);
          expect(answer.headers.get("x-session-id")).toBe("");
        }
      });

      it("allows an ES256 token from the same key set", async () => {
        const answer = await bearer(signToken(ec, claims({ plan: "basic" })));
        expect(answer.status, answer.body).toBe(200);
        expect(answer.headers.get("x-user-tier")).toBe("free");
      });

      it("gives EXTERNAL_DEFAULT_TIER to a plan value the map does not know, and to no plan at all", async () => {
        for (const extra of [{ plan: "platinum" }, {}, { plan: 42 }]) {
          const answer = await bearer(signToken(rsa, claims(extra)));
          expect(answer.status, answer.body).toBe(200);
          expect(answer.headers.get("x-user-tier")).toBe("free");
        }
      });

      it("counts one subject's tokens in one window, however many tokens it has", async () => {
        const c = claims({ plan: "basic" });
        const first = await bearer(signToken(rsa, c));
        const second = await bearer(signToken(ec, { ...c, iat: c.iat + 1 }));
        expect(Number(second.headers.get("x-ratelimit-used"))).toBe(
          Number(first.headers.get("x-ratelimit-used")) + 1,
        );
      });

      it.each([
        ["a wrong issuer", () => signToken(rsa, claims({ iss: "https://evil.example/" }))],
        ["a wrong audience", () => signToken(rsa, claims({ aud: "api://someone-else" }))],
        ["an audience list without ours", () => signToken(rsa, claims({ aud: ["a", "b"] }))],
        ["an expired token", () => signToken(rsa, claims({ exp: Math.floor(Date.now() / 1000) - 60 }))],
        ["a token not yet valid", () => signToken(rsa, claims({ nbf: Math.floor(Date.now() / 1000) + 120 }))],
        ["a token without exp", () => signToken(rsa, claims({ exp: undefined }))],
        ["alg none", () => unsigned(claims(), rsa.kid)],
        ["HS256 signed with the provider's public key", () => signHs256(publicPem(rsa), claims(), rsa.kid)],
        ["an RSA key's kid under ES256", () => signToken(rsa, claims(), { alg: "ES256" })],
        ["an algorithm outside the allow-list", () => signToken(rsa, claims(), { alg: "RS512" })],
        ["a forged signature", () => `${signToken(rsa, claims()).slice(0, -6)}AAAAAA`],
        ["a subject with a space", () => signToken(rsa, claims({ sub: "a b" }))],
        ["Keycloak's ID token (typ claim ID)", () => signToken(rsa, claims({ typ: "ID", nonce: "n-1" }))],
        ["an OIDC back-channel logout token", () => signToken(rsa, claims(), { typ: "logout+jwt" })],
        ["an iss without JWT_ISSUER's trailing slash", () => signToken(rsa, claims({ iss: idp.url }))],
      ])("refuses %s with 401", async (_what, make) => {
        const answer = await bearer(make());
        expect(answer.status, answer.body).toBe(401);
        expect(answer.headers.get("x-user-id")).toBeNull();
      });

      it("allows a provider token of 12 KiB (many groups, as Entra ID and Keycloak send), and refuses one past 16,000 characters as too long", async () => {
        const groups = (n: number) =>
          Array.from({ length: n }, (_, i) => `group-${String(i).padStart(26, "0")}`);
        const long = signToken(rsa, claims({ groups: groups(260), plan: "premium" }));
        expect(long.length).toBeGreaterThan(12 * 1024);
        expect(long.length).toBeLessThan(16 * 1024);
        const allowed = await bearer(long);
        expect(allowed.status, allowed.body).toBe(200);
        expect(allowed.headers.get("x-user-tier")).toBe("pro");
        const tooLong = signToken(rsa, claims({ groups: groups(340) }));
        expect(tooLong.length).toBeGreaterThan(16 * 1024);
        const refused = await bearer(tooLong);
        expect(refused.status).toBe(401);
        expect(JSON.parse(refused.body).message).toBe("token too long");
        expect(refused.headers.get("www-authenticate")).toContain('error_description="token too long"');
      });

      it("says why it refuses a token that is no access token or names another issuer, and logs none of them", async () => {
        const refusals: [string, string][] = [
          [signToken(rsa, claims({ typ: "ID" })), "token is not an access token"],
          [signToken(ec, claims({ typ: "Refresh" })), "token is not an access token"],
          [signToken(rsa, claims(), { typ: "dpop+jwt" }), "token type not accepted"],
          [
            signToken(rsa, claims({ iss: idp.url })),
            "token issuer not accepted: it and JWT_ISSUER differ in a trailing slash",
          ],
        ];
        for (const [token, message] of refusals) {
          const answer = await bearer(token);
          expect(answer.status, answer.body).toBe(401);
          expect(JSON.parse(answer.body).message).toBe(message);
          expect(answer.headers.get("www-authenticate")).toContain(`error_description="${message}"`);
        }
        const signatures = refusals.map(([token]) => token.slice(token.lastIndexOf(".") + 1));
        expect(running.logWrites().some((line) => signatures.some((s) => line.includes(s)))).toBe(false);
        // An access token beside them: Keycloak's says typ Bearer, RFC 9068's at+jwt.
        expect((await bearer(signToken(rsa, claims({ typ: "Bearer" })))).status).toBe(200);
        expect((await bearer(signToken(ec, claims(), { typ: "at+jwt" }))).status).toBe(200);
      });

      it("says a token expired when it did", async () => {
        const answer = await bearer(signToken(rsa, claims({ exp: Math.floor(Date.now() / 1000) - 60 })));
        expect(JSON.parse(answer.body).message).toBe("token expired");
      });

      it("blocks and unblocks a subject through the admin API, effective on the next request", async () => {
        const c = claims();
        const token = signToken(rsa, c);
        expect((await bearer(token)).status).toBe(200);
        const path = `/admin/subjects/${encodeURIComponent(c.sub)}/blocked`;
        expect((await adminCall("PUT", path)).status).toBe(200);
        const blocked = await bearer(token);
        expect(blocked.status).toBe(401);
        expect(JSON.parse(blocked.body).message).toBe("account disabled");
        expect((await adminCall("DELETE", path)).status).toBe(200);
        expect((await bearer(token)).status).toBe(200);
      });

      it("blocks a subject that is a URL path step ('.' or '..') sent escaped as written, as curl sends it", async () => {
        const admin = (method: string, path: string) =>
          rawRequest(
            running.adminUrl,
            `${method} ${path} HTTP/1.1\r\nHost: tollgate\r\nAuthorization: Bearer ${running.adminToken}\r\nConnection: close\r\n\r\n`,
          );
        for (const [sub, escaped] of [
          ["..", "%2E%2E"],
          [".", "%2e"],
        ] as const) {
          const token = signToken(rsa, claims({ sub }));
          expect((await bearer(token)).status).toBe(200);
          const put = await admin("PUT", `/admin/subjects/${escaped}/blocked`);
          expect([put.status, JSON.parse(put.body)]).toEqual([200, { sub, blocked: true }]);
          expect(JSON.parse((await bearer(token)).body).message).toBe("account disabled");
          expect((await admin("DELETE", `/admin/subjects/${escaped}/blocked`)).status).toBe(200);
          expect((await bearer(token)).status).toBe(200);
        }
      });

      it("takes a tier and own limits set for a subject over the token's", async () => {
        const c = claims({ plan: "basic" });
        const token = signToken(rsa, c);
        const sub = encodeURIComponent(c.sub);
        expect((await adminCall("PUT", `/admin/subjects/${sub}/tier`, { tier: "enterprise" })).status).toBe(
          200,
        );
        expect((await bearer(token)).headers.get("x-user-tier")).toBe("enterprise");
        expect((await adminCall("PUT", `/admin/subjects/${sub}/limits`, { search: "2/1m" })).status).toBe(
          200,
        );
        expect((await bearer(token)).status).toBe(200);
        expect((await bearer(token)).status).toBe(429);
        const profile = await adminCall<{ tier: string; own_limits: unknown }>(
          "GET",
          `/admin/subjects/${sub}`,
        );
        expect(profile.body).toMatchObject({
          tier: "enterprise",
          blocked: false,
          own_limits: { search: ["2/1m"] },
        });
        expect((await adminCall("DELETE", `/admin/subjects/${sub}/limits`)).status).toBe(200);
        expect((await adminCall("DELETE", `/admin/subjects/${sub}/tier`)).status).toBe(200);
        const back = await bearer(token);
        expect(back.status).toBe(200);
        expect(back.headers.get("x-user-tier")).toBe("free");
      });

      it("keeps tollgate's own login tokens working beside provider tokens", async () => {
        const login = await running.loginOk("alice", "secret");
        const answer = await bearer(login.access_token);
        expect(answer.status, answer.body).toBe(200);
        expect(answer.headers.get("x-user-id")).toBe(login.user_id);
      });
    });

    describe("API keys", () => {
      const create = async (json: Record<string, unknown>) => {
        const reply = await adminCall<KeyBody>("POST", "/admin/api-keys", json);
        expect(reply.status, JSON.stringify(reply.body)).toBe(201);
        return reply.body;
      };

      it("shows a new key once, shaped tg_…, and lists keys without any secret", async () => {
        const reply = await adminCall<KeyBody>("POST", "/admin/api-keys", { name: "ci runner", tier: "pro" });
        expect(reply.status).toBe(201);
        // The key must stay out of every cache on the way.
        expect(reply.headers.get("cache-control")).toBe("no-store");
        expect(reply.headers.get("pragma")).toBe("no-cache");
        const made = reply.body;
        expect(made.key).toMatch(KEY_SHAPE);
        expect(made).toMatchObject({ name: "ci runner", tier: "pro", user_id: null, last_used_at: null });
        const listed = await adminCall<{ api_keys: Record<string, unknown>[] }>("GET", "/admin/api-keys");
        const text = JSON.stringify(listed.body);
        expect(text).not.toContain(made.key);
        expect(text).not.toContain(made.key.slice(20));
        const mine = listed.body.api_keys.find((k) => k.id === made.id);
        expect(mine).toBeDefined();
        expect(Object.keys(mine ?? {}).sort()).toEqual(
          ["blocked", "created_at", "id", "last_used_at", "name", "own_limits", "tier", "user_id"].sort(),
        );
      });

      it("allows a key sent as X-API-Key or as Authorization: ApiKey, with its own tier", async () => {
        const made = await create({ name: "both ways", tier: "enterprise" });
        const ways: Record<string, string>[] = [
          { "x-api-key": made.key },
          { authorization: `ApiKey ${made.key}` },
        ];
        for (const headers of ways) {
          const answer = await check(headers);
          expect(answer.status, answer.body).toBe(200);
          expect(answer.headers.get("x-user-tier")).toBe("enterprise");
          expect(answer.headers.get("x-user-id")).toBe(`key:${made.id}`);
        }
        const listed = await adminCall<KeyBody>("GET", `/admin/api-keys/${made.id}`);
        expect(listed.body.last_used_at).not.toBeNull();
      });

      it("takes X-API-Key beside Authorization: Basic meant for the upstream, and a Bearer token over it", async () => {
        const made = await create({ name: "beside basic", tier: "pro" });
        const basic = `Basic ${Buffer.from("upstream:password").toString("base64")}`;
        const withBasic = await check({ authorization: basic, "x-api-key": made.key });
        expect(withBasic.status, withBasic.body).toBe(200);
        expect(withBasic.headers.get("x-user-id")).toBe(`key:${made.id}`);
        expect(withBasic.headers.get("x-user-tier")).toBe("pro");
        const basicAlone = await check({ authorization: basic });
        expect(JSON.parse(basicAlone.body).message).toBe("expected a Bearer token or an API key");
        // Bearer wins over the key header: its token decides, good or bad.
        const c = claims({ plan: "basic" });
        const withBearer = await check({
          authorization: `Bearer ${signToken(rsa, c)}`,
          "x-api-key": made.key,
        });
        expect(withBearer.headers.get("x-user-id")).toBe(`ext:${c.sub}`);
        const badBearer = await check({ authorization: "Bearer not-a-token", "x-api-key": made.key });
        expect(badBearer.status).toBe(401);
      });

      it("names the key's user upstream when it was given one", async () => {
        const user = await running.newUser("free");
        const made = await create({ name: "for a user", tier: "free", user_id: user.id });
        const answer = await check({ "x-api-key": made.key });
        expect(answer.status, answer.body).toBe(200);
        expect(answer.headers.get("x-user-id")).toBe(user.id);
        expect(
          (await adminCall("POST", "/admin/api-keys", { name: "x", tier: "free", user_id: "nobody" })).status,
        ).toBe(400);
      });

      it("refuses in production a key created for a demo user, as the demo user's own login, without counting it", async () => {
        // A store that a tollgate outside production filled: a demo user, and a key that acts for it.
        const demos = await create({ name: "for alice", tier: "enterprise", user_id: "demo-alice" });
        const unbound = await create({ name: "no user", tier: "enterprise" });
        const demoAnswer = await check({ "x-api-key": demos.key });
        expect(demoAnswer.status, demoAnswer.body).toBe(200);
        expect(demoAnswer.headers.get("x-user-id")).toBe("demo-alice");
        const production = await startInProcess({
          store: running.store,
          demoUsers: false,
          env: {
            LOG_LEVEL: "silent",
            NODE_ENV: "production",
            JWT_SECRET: randomBytes(32).toString("base64"),
            ADMIN_TOKEN: randomBytes(32).toString("base64"),
          },
        });
        try {
          const inProduction = (key: string) =>
            fetch(`${production.checkUrl}/ext_authz/api/search`, {
              headers: { "x-forwarded-for": "198.18.255.1", "x-api-key": key },
            });
          for (let i = 0; i < 2; i += 1) {
            const refused = await inProduction(demos.key);
            expect(refused.status).toBe(401);
            expect(((await refused.json()) as { message: string }).message).toBe("account disabled");
            expect(refused.headers.get("x-user-id")).toBeNull();
          }
          expect((await inProduction(unbound.key)).status).toBe(200);
          // Refused before it was counted: the key's window holds only its one use outside production.
          const again = await check({ "x-api-key": demos.key });
          expect(again.headers.get("x-ratelimit-used")).toBe("2");
          const dryRun = await production.admin<{ status: number; reason: string }>("POST", "/admin/check", {
            token: production.adminToken,
            json: { method: "GET", path: "/api/search", authorization: `ApiKey ${demos.key}` },
          });
          expect(dryRun.body).toMatchObject({ status: 401, reason: "inactive" });
        } finally {
          await production.close();
        }
      });

      it("refuses a user's keys while the user is disabled, and revokes them with the user", async () => {
        const user = await running.newUser("free");
        const other = await running.newUser("free");
        const first = await create({ name: "user key 1", tier: "pro", user_id: user.id });
        const second = await create({ name: "user key 2", tier: "free", user_id: user.id });
        const unrelated = await create({ name: "another user's", tier: "free", user_id: other.id });
        const status = async (key: KeyBody) => (await check({ "x-api-key": key.key })).status;
        expect([await status(first), await status(second), await status(unrelated)]).toEqual([200, 200, 200]);

        const disabled = await adminCall<Record<string, unknown>>("PUT", `/admin/users/${user.id}/disabled`, {
          disabled: true,
        });
        expect(disabled.body).toMatchObject({ disabled: true, api_keys_blocked: 2 });
        expect([await status(first), await status(second), await status(unrelated)]).toEqual([401, 401, 200]);
        expect(
          (await adminCall<KeyBody & { blocked: boolean }>("GET", `/admin/api-keys/${first.id}`)).body
            .blocked,
        ).toBe(true);
        // No new key for a disabled user.
        expect(
          (await adminCall("POST", "/admin/api-keys", { name: "x", tier: "free", user_id: user.id })).status,
        ).toBe(409);

        const enabled = await adminCall<Record<string, unknown>>("PUT", `/admin/users/${user.id}/disabled`, {
          disabled: false,
        });
        expect(enabled.body).toMatchObject({ disabled: false, api_keys_unblocked: 2 });
        expect([await status(first), await status(second)]).toEqual([200, 200]);

        const deleted = await adminCall<Record<string, unknown>>("DELETE", `/admin/users/${user.id}`);
        expect(deleted.body).toMatchObject({ api_keys_revoked: 2 });
        expect([await status(first), await status(second), await status(unrelated)]).toEqual([401, 401, 200]);
        expect((await adminCall("GET", `/admin/api-keys/${second.id}`)).status).toBe(404);
        expect((await adminCall("GET", `/admin/api-keys/${unrelated.id}`)).status).toBe(200);
      });

      it("finishes deleting a user on a retry after revoking its keys failed, and revokes a key made meanwhile", async () => {
        const user = await running.newUser("free");
        const made = await create({ name: "outlives a failure?", tier: "free", user_id: user.id });
        const base = running.store;
        let failures = 1;
        let late: ApiKey | undefined;
        // The same store, with a key revocation that times out once, and a key created for the user
        // just before it goes (by a creation that checked the user while it was still there).
        const flaky: Store = {
          ...base,
          apiKeys: {
            ...base.apiKeys,
            async remove(id) {
              if (failures-- > 0) throw new StoreUnavailableError(new Error("timed out"));
              return base.apiKeys.remove(id);
            },
          },
          users: {
            ...base.users,
            async remove(id) {
              const { id: keyId, hash } = newApiKey();
              late = await base.apiKeys.create({ id: keyId, hash, name: "late", tier: "free", userId: id });
              return base.users.remove(id);
            },
          },
        };
        const other = await startInProcess({ store: flaky, demoUsers: false, env: { LOG_LEVEL: "silent" } });
        try {
          const path = `/admin/users/${user.id}`;
          const failed = await other.admin("DELETE", path, { token: other.adminToken });
          expect(failed.status).toBe(503);
          // Nothing was deleted: the user is there for the retry to find.
          expect((await other.admin("GET", path, { token: other.adminToken })).status).toBe(200);
          const retried = await other.admin<Record<string, unknown>>("DELETE", path, {
            token: other.adminToken,
          });
          expect(retried.status).toBe(200);
          expect(retried.body).toMatchObject({ user_id: user.id, api_keys_revoked: 2 });
          expect((await check({ "x-api-key": made.key })).status).toBe(401);
          expect(late).toBeDefined();
          expect(await base.apiKeys.get(late?.id ?? "")).toBeUndefined();
          expect((await other.admin("GET", path, { token: other.adminToken })).status).toBe(404);
        } finally {
          await other.close();
        }
      });

      it("finishes deleting a user on a retry after resetting its windows failed", async () => {
        const user = await running.newUser("free");
        const base = running.store;
        let failures = 1;
        const flaky: Store = {
          ...base,
          limiter: {
            ...base.limiter,
            async reset(subject, categories) {
              if (failures-- > 0) throw new StoreUnavailableError(new Error("timed out"));
              return base.limiter.reset(subject, categories);
            },
          },
        };
        const other = await startInProcess({ store: flaky, demoUsers: false, env: { LOG_LEVEL: "silent" } });
        try {
          const path = `/admin/users/${user.id}`;
          expect((await other.admin("DELETE", path, { token: other.adminToken })).status).toBe(503);
          expect((await other.admin("GET", path, { token: other.adminToken })).status).toBe(200);
          expect((await other.admin("DELETE", path, { token: other.adminToken })).status).toBe(200);
          expect((await other.admin("GET", path, { token: other.adminToken })).status).toBe(404);
        } finally {
          await other.close();
        }
      });

      it("lists keys page by page with limit and after, every key once", async () => {
        for (let i = 0; i < 5; i += 1) await create({ name: `paged ${i}`, tier: "free" });
        const all = await adminCall<{ api_keys: KeyBody[]; next: string | null }>("GET", "/admin/api-keys");
        expect(all.body.next).toBeNull();
        const seen: string[] = [];
        let after: string | null = null;
        let pages = 0;
        do {
          const query: string = after === null ? "?limit=2" : `?limit=2&after=${after}`;
          const page = await adminCall<{ api_keys: KeyBody[]; next: string | null }>(
            "GET",
            `/admin/api-keys${query}`,
          );
          expect(page.status).toBe(200);
          expect(page.body.api_keys.length).toBeLessThanOrEqual(2);
          seen.push(...page.body.api_keys.map((k) => k.id));
          after = page.body.next;
          pages += 1;
        } while (after !== null);
        expect(seen).toEqual(all.body.api_keys.map((k) => k.id));
        expect(pages).toBeGreaterThanOrEqual(3);
        // The last page says so, even when it is full: no empty page after it.
        const ids = seen.slice(-2);
        const last = await adminCall<{ api_keys: KeyBody[]; next: string | null }>(
          "GET",
          `/admin/api-keys?limit=1&after=${ids[0]}`,
        );
        expect(last.body.api_keys.map((k) => k.id)).toEqual([ids[1]]);
        expect(last.body.next).toBeNull();
        for (const bad of ["?limit=0", "?limit=1001", "?limit=x", "?after=tg_x", "?page=2"]) {
          const reply = await adminCall<{ error: string }>("GET", `/admin/api-keys${bad}`);
          expect(reply.status, bad).toBe(400);
          expect(reply.body.error).toBe("bad_request");
        }
      });

      it("trims a key's name and refuses one that is blank, too long or holds control characters", async () => {
        const trimmed = await create({ name: "  nightly build\t", tier: "free" });
        expect(trimmed.name).toBe("nightly build");
        expect((await adminCall<KeyBody>("GET", `/admin/api-keys/${trimmed.id}`)).body.name).toBe(
          "nightly build",
        );
        expect((await create({ name: "x".repeat(100), tier: "free" })).name).toHaveLength(100);
        const refused: [unknown, string][] = [
          ["   ", "name: must not be empty or only spaces"],
          ["", "name: must not be empty or only spaces"],
          [` ${"x".repeat(101)} `, "name: must be at most 100 characters"],
          ["a\u0000b", "name: must not contain control characters (U+0000 at character 2)"],
          ["two\nlines", "name: must not contain control characters (U+000A at character 4)"],
          ["\u001b[2Jcleared", "name: must not contain control characters (U+001B at character 1)"],
          ["csi\u009b", "name: must not contain control characters (U+009B at character 4)"],
          ["para\u2029graph", "name: must not contain line or paragraph separators (U+2029 at character 5)"],
          ["\u202etxt.exe", "name: must not contain bidirectional text controls (U+202E at character 1)"],
          [42, "name: Invalid input: expected string, received number"],
        ];
        for (const [name, message] of refused) {
          const reply = await adminCall<{ error: string; message: string }>("POST", "/admin/api-keys", {
            name,
            tier: "free",
          });
          expect(reply.status, JSON.stringify(name)).toBe(400);
          expect(reply.body).toEqual({ error: "bad_request", message });
        }
      });

      it("refuses a key with the right id and another secret, and a malformed one", async () => {
        const made = await create({ name: "guessed", tier: "free" });
        const forged = `${made.key.slice(0, 20)}${"A".repeat(43)}`;
        expect((await check({ "x-api-key": forged })).status).toBe(401);
        expect((await check({ "x-api-key": "tg_not-a-key" })).status).toBe(401);
        expect((await check({ "x-api-key": made.key })).status).toBe(200);
      });

      it("refuses a key from its deletion's answer on, and answers 404 for it afterwards", async () => {
        const made = await create({ name: "to revoke", tier: "free" });
        expect((await check({ "x-api-key": made.key })).status).toBe(200);
        const removed = await adminCall("DELETE", `/admin/api-keys/${made.id}`);
        expect(removed.status).toBe(200);
        const after = await check({ "x-api-key": made.key });
        expect(after.status).toBe(401);
        expect(JSON.parse(after.body).message).toBe("API key unknown or revoked");
        expect((await adminCall("DELETE", `/admin/api-keys/${made.id}`)).status).toBe(404);
      });

      it("counts a revoked key as a bad credential: 401 until the address's anonymous limit is full, then 429", async () => {
        const made = await create({ name: "revoked, then flooded", tier: "free" });
        expect((await adminCall("DELETE", `/admin/api-keys/${made.id}`)).status).toBe(200);
        const from = async (ip: string) => {
          const res = await fetch(`${running.checkUrl}/ext_authz/api/search`, {
            headers: { "x-forwarded-for": ip, "x-api-key": made.key },
          });
          return { status: res.status, body: (await res.json()) as Record<string, unknown> };
        };
        // The address's anonymous search window (20 an hour) counts each check, the first (the
        // store's answer that the key is gone) included, as it counts any bad token.
        const answers = [];
        for (let i = 0; i < 22; i += 1) answers.push(await from("198.18.254.1"));
        expect(answers.map((a) => a.status)).toEqual([...Array(20).fill(401), 429, 429]);
        expect(answers[0]?.body.message).toBe("API key unknown or revoked");
        expect(answers[20]?.body).toMatchObject({ error: "rate_limit_exceeded", tier: "anonymous" });
        // Another address has its own window.
        expect((await from("198.18.254.2")).status).toBe(401);
      });

      it("counts keys it never issued against the address: a flood of made-up keys meets the anonymous limit", async () => {
        // Anyone can make up well-formed keys, each new to the store: before, each one's check went
        // uncounted, so fresh keys got 401 (and cost a store call) without end.
        const from = async (ip: string) => {
          const res = await fetch(`${running.checkUrl}/ext_authz/api/search`, {
            headers: { "x-forwarded-for": ip, "x-api-key": newApiKey().key },
          });
          return { status: res.status, body: (await res.json()) as Record<string, unknown> };
        };
        const answers = [];
        for (let i = 0; i < 22; i += 1) answers.push(await from("198.18.253.1"));
        expect(answers.map((a) => a.status)).toEqual([...Array(20).fill(401), 429, 429]);
        expect(answers[0]?.body.message).toBe("API key unknown or revoked");
        expect(answers[21]?.body).toMatchObject({ error: "rate_limit_exceeded", tier: "anonymous" });
        expect((await from("198.18.253.2")).status).toBe(401);
      });

      it("counts a made-up key's check once in the per-address layer, and then in the anonymous one", async () => {
        const layered = await startInProcess({
          store: await makeStore(),
          policy: parsePolicy(`ip: 3/1m\n${DEFAULT_POLICY_YAML}`, "ip layer"),
          env: { LOG_LEVEL: "silent" },
        });
        try {
          const statuses = [];
          for (let i = 0; i < 4; i += 1) {
            const res = await fetch(`${layered.checkUrl}/ext_authz/api/products`, {
              headers: { "x-forwarded-for": "198.18.252.1", "x-api-key": newApiKey().key },
            });
            statuses.push([res.status, res.headers.get("x-ratelimit-resource")]);
          }
          // Three checks fill the address's layer (3 a minute): the key's own call counts nothing.
          expect(statuses).toEqual([
            [401, null],
            [401, null],
            [401, null],
            [429, "ip"],
          ]);
        } finally {
          await layered.close();
        }
      });

      it("refuses a revoked key at once even while its refusal is cached", async () => {
        const made = await create({ name: "cached refusal", tier: "free" });
        expect((await adminCall("PUT", `/admin/api-keys/${made.id}/limits`, { search: "1/1h" })).status).toBe(
          200,
        );
        expect((await check({ "x-api-key": made.key })).status).toBe(200);
        expect((await check({ "x-api-key": made.key })).status).toBe(429);
        expect((await check({ "x-api-key": made.key })).status).toBe(429);
        await adminCall("DELETE", `/admin/api-keys/${made.id}`);
        expect((await check({ "x-api-key": made.key })).status).toBe(401);
      });

      it("changes a key's tier on the next request", async () => {
        const made = await create({ name: "tiered", tier: "free" });
        expect((await adminCall("PUT", `/admin/api-keys/${made.id}/tier`, { tier: "pro" })).status).toBe(200);
        expect((await check({ "x-api-key": made.key })).headers.get("x-user-tier")).toBe("pro");
        expect((await adminCall("POST", "/admin/api-keys", { name: "x", tier: "gold" })).status).toBe(400);
      });

      it("puts the per-address layer in front of a key and of a provider token, as of a user", async () => {
        const layered = await startInProcess({
          store: await makeStore(),
          policy: parsePolicy(`ip: 2/1m\n${DEFAULT_POLICY_YAML}`, "ip layer"),
          env: { LOG_LEVEL: "silent", JWKS_URL: idp.jwksUrl, JWT_ISSUER: idp.issuer, JWT_AUDIENCE: AUDIENCE },
        });
        try {
          await layered.tollgate.providerKeys?.ready();
          const made = await layered.admin<KeyBody>("POST", "/admin/api-keys", {
            token: layered.adminToken,
            json: { name: "layered", tier: "enterprise" },
          });
          const token = signToken(rsa, claims());
          const from = (ip: string, headers: Record<string, string>) =>
            fetch(`${layered.checkUrl}/ext_authz/api/products`, {
              headers: { "x-forwarded-for": ip, ...headers },
            });
          const ways: Record<string, string>[] = [
            { "x-api-key": made.body.key },
            { authorization: `Bearer ${token}` },
          ];
          for (const headers of ways) {
            const ip = `198.19.${ipCount >> 8}.${ipCount++ & 255}`;
            expect((await from(ip, headers)).status).toBe(200);
            expect((await from(ip, headers)).status).toBe(200);
            const third = await from(ip, headers);
            expect(third.status).toBe(429);
            expect(third.headers.get("x-ratelimit-resource")).toBe("ip");
          }
        } finally {
          await layered.close();
        }
      });

      it("logs each admin change of a key's or a subject's tier and limits, with its request id, never the key or the subject", async () => {
        const made = await create({ name: "audited", tier: "free" });
        const sub = `auth0|audited-${randomBytes(4).toString("hex")}`;
        const path = encodeURIComponent(sub);
        const calls: [string, string, unknown, Record<string, unknown>][] = [
          [
            "PUT",
            `/admin/api-keys/${made.id}/tier`,
            { tier: "pro" },
            { event: "api_key_tier", keyId: made.id, tier: "pro" },
          ],
          [
            "PUT",
            `/admin/api-keys/${made.id}/limits`,
            { search: "5/1m", general: null },
            { event: "api_key_limits_set", keyId: made.id, categories: ["search", "general"] },
          ],
          [
            "DELETE",
            `/admin/api-keys/${made.id}/limits`,
            undefined,
            { event: "api_key_limits_reset", keyId: made.id },
          ],
          ["PUT", `/admin/subjects/${path}/tier`, { tier: "pro" }, { event: "subject_tier", tier: "pro" }],
          ["DELETE", `/admin/subjects/${path}/tier`, undefined, { event: "subject_tier", tier: null }],
          [
            "PUT",
            `/admin/subjects/${path}/limits`,
            { search: "5/1m" },
            { event: "subject_limits_set", categories: ["search"] },
          ],
          ["DELETE", `/admin/subjects/${path}/limits`, undefined, { event: "subject_limits_reset" }],
          ["PUT", `/admin/subjects/${path}/blocked`, undefined, { event: "subject_blocked" }],
          ["DELETE", `/admin/api-keys/${made.id}`, undefined, { event: "api_key_revoked", keyId: made.id }],
        ];
        for (const [method, url, json, logged] of calls) {
          const requestId = `audit-${randomBytes(6).toString("hex")}`;
          const reply = await running.admin(method, url, {
            token: running.adminToken,
            headers: { "x-request-id": requestId },
            ...(json === undefined ? {} : { json }),
          });
          expect(reply.status, `${method} ${url}`).toBe(200);
          const lines = running
            .logWrites()
            .filter((line) => line.includes(requestId))
            .map((line) => JSON.parse(line) as Record<string, unknown>);
          expect(lines, `${method} ${url}`).toEqual([expect.objectContaining({ ...logged, requestId })]);
        }
        const written = running.logWrites().join("\n");
        expect(written).not.toContain(made.key.slice(20));
        expect(written).not.toContain(sub);
        expect(written).not.toContain(path);
      });

      it("never writes a key into the log", async () => {
        const made = await create({ name: "quiet", tier: "free" });
        await check({ "x-api-key": made.key });
        await adminCall("DELETE", `/admin/api-keys/${made.id}`);
        await check({ "x-api-key": made.key });
        const secret = made.key.slice(20);
        expect(running.logWrites().some((line) => line.includes(secret))).toBe(false);
        expect(running.logWrites().some((line) => line.includes("api_key_revoked"))).toBe(true);
      });
    });
  });
}
