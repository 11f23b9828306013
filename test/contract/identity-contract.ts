// The identity contract: login, sessions, revocation, lockout and the admin API, over real HTTP,
// run unchanged against the memory and Redis stores.
import { createHmac } from "node:crypto";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DEFAULT_POLICY_YAML } from "../../src/policy/policy.js";
import type { Store } from "../../src/store/store.js";
import type { ErrorBody, LimitsBody, LoginBody, MeBody, SessionsBody } from "../support/http-client.mjs";
import { claimsOf, type InProcess, sleep, startInProcess, uniqueName } from "../support/in-process.js";
import { rawRequest } from "../support/raw-http.js";
import { ADMIN_TOKEN, JWT_SECRET } from "../support/secrets.mjs";
import { describeUserLifecycleContract } from "./user-lifecycle-contract.js";
import { describeUsernameContract } from "./username-contract.js";

export type StoreFactory = () => Store | Promise<Store>;

const SESSION_ID = /^[A-Za-z0-9_-]{22}$/;
const ISO_TIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;
const SESSION_FIELDS = [
  "created_at",
  "device_name",
  "ip",
  "is_current",
  "last_accessed",
  "session_id",
  "user_agent",
];

export function describeIdentityContract(name: string, makeStore: StoreFactory): void {
  describe(`identity contract: ${name}`, () => {
    const started: InProcess[] = [];
    /** A tollgate on a fresh store of its own. */
    const start = async (env: Record<string, string> = {}): Promise<InProcess> => {
      const running = await startInProcess({
        store: await makeStore(),
        env: { LOG_LEVEL: "silent", ...env },
      });
      started.push(running);
      return running;
    };
    let t: InProcess;

    beforeAll(async () => {
      t = await start();
    });
    afterAll(async () => {
      for (const running of started) {
        await running.close();
        await running.store.close();
      }
    });

    const me = (token: string) => t.api<MeBody>("GET", "/me", { token });
    const sessionsOf = async (token: string): Promise<SessionsBody> => {
      const reply = await t.api<SessionsBody>("GET", "/auth/sessions", { token });
      expect(reply.status).toBe(200);
      return reply.body;
    };
    /** The /me status of each token, in order. */
    const statuses = async (tokens: string[]): Promise<number[]> =>
      Promise.all(tokens.map(async (token) => (await me(token)).status));

    describe("login", () => {
      it("answers 200 with a bearer token, its lifetime, the session and the user's tier", async () => {
        const reply = await t.login("alice", "secret", { device: "laptop" });
        expect(reply.status).toBe(200);
        // The token must stay out of every cache on the way.
        expect(reply.headers.get("cache-control")).toBe("no-store");
        expect(reply.headers.get("pragma")).toBe("no-cache");
        const body = reply.body as LoginBody;
        expect(Object.keys(body).sort()).toEqual([
          "access_token",
          "expires_in",
          "session_id",
          "tier",
          "token_type",
          "user_id",
        ]);
        expect(body).toMatchObject({
          token_type: "Bearer",
          expires_in: 86_400,
          user_id: "demo-alice",
          tier: "free",
        });
        expect(body.session_id).toMatch(SESSION_ID);
        const claims = claimsOf(body.access_token);
        expect(claims).toMatchObject({
          sub: "demo-alice",
          sid: body.session_id,
          tier: "free",
          iss: "tollgate",
        });
        expect((claims.exp as number) - (claims.iat as number)).toBe(86_400);
      });

      it("answers each demo user with their own tier", async () => {
        expect(await t.loginOk("bob_pro", "secret")).toMatchObject({ user_id: "demo-bob", tier: "pro" });
        expect(await t.loginOk("ent_carol", "secret")).toMatchObject({
          user_id: "demo-carol",
          tier: "enterprise",
        });
      });

      it("shows the caller's identity and device on GET /me", async () => {
        const login = await t.loginOk("alice", "secret", { device: "kitchen tablet" });
        const reply = await me(login.access_token);
        expect(reply.status).toBe(200);
        expect(reply.body).toEqual({
          user_id: "demo-alice",
          username: "alice",
          tier: "free",
          device: "kitchen tablet",
          session_id: login.session_id,
        });
      });

      it("answers a wrong password and an unknown user with the same 401 and the same body", async () => {
        const wrong = await t.login("alice", "not-the-password");
        const unknown = await t.login(uniqueName("nobody"), "secret");
        expect(wrong.status).toBe(401);
        expect(unknown.status).toBe(401);
        expect(wrong.body).toEqual({ error: "unauthorized", message: "Invalid username or password" });
        expect(unknown.body).toEqual(wrong.body);
        expect(unknown.headers.get("www-authenticate")).toBe(wrong.headers.get("www-authenticate"));
      });

      it("refuses malformed bodies with a 4xx JSON error, never a 500", async () => {
        const json = { "content-type": "application/json" };
        const cases: { body: string; headers: Record<string, string>; status: number; error: string }[] = [
          { body: '{"username":"alice",', headers: json, status: 400, error: "invalid_json" },
          { body: "not json at all", headers: json, status: 400, error: "invalid_json" },
          { body: "null", headers: json, status: 400, error: "invalid_json" },
          { body: "[]", headers: json, status: 400, error: "bad_request" },
          { body: "{}", headers: json, status: 400, error: "bad_request" },
          { body: '{"username":"alice"}', headers: json, status: 400, error: "bad_request" },
          { body: '{"password":"secret"}', headers: json, status: 400, error: "bad_request" },
          { body: '{"username":5,"password":"secret"}', headers: json, status: 400, error: "bad_request" },
          { body: '{"username":"","password":"secret"}', headers: json, status: 400, error: "bad_request" },
          { body: "", headers: json, status: 400, error: "bad_request" },
          {
            body: "username=alice&password=secret",
            headers: {},
            status: 415,
            error: "unsupported_media_type",
          },
          {
            body: "username=alice&password=secret",
            headers: { "content-type": "application/x-www-form-urlencoded" },
            status: 415,
            error: "unsupported_media_type",
          },
          {
            body: '{"username":"alice","password":"secret"}',
            headers: { "content-type": "text/plain" },
            status: 415,
            error: "unsupported_media_type",
          },
          {
            body: JSON.stringify({ username: "alice", password: "p".repeat(20_000) }),
            headers: json,
            status: 413,
            error: "payload_too_large",
          },
        ];
        for (const c of cases) {
          // fetch labels a string body text/plain; bytes go without a content type.
          const body = "content-type" in c.headers ? c.body : Buffer.from(c.body);
          const reply = await t.api<ErrorBody>("POST", "/auth/login", { body, headers: c.headers });
          const label = `${JSON.stringify(c.headers)} ${c.body.slice(0, 40)}`;
          expect(reply.status, label).toBe(c.status);
          expect(reply.headers.get("content-type"), label).toMatch(/^application\/json/);
          expect(reply.body.error, label).toBe(c.error);
          expect(typeof reply.body.message, label).toBe("string");
        }
      });

      it("answers a body sent without Content-Type 415 and no body at all 400, on public and admin routes", async () => {
        const routes = [
          { call: t.api, path: "/auth/login", json: { username: "alice", password: "secret" } },
          {
            call: t.admin,
            path: "/admin/users",
            json: () => ({
              username: uniqueName("typeless"),
              password: "a-long-enough-password",
              tier: "free",
            }),
          },
          { call: t.admin, path: "/admin/api-keys", json: { name: "typeless", tier: "free" } },
        ];
        const unsupported = { error: "unsupported_media_type", message: "Send the body as application/json" };
        const required = { error: "bad_request", message: "A JSON body is required" };
        for (const route of routes) {
          const token = route.call === t.admin ? ADMIN_TOKEN : undefined;
          const json = () => (typeof route.json === "function" ? route.json() : route.json);
          const call = (options: { body?: Buffer; json?: unknown; headers?: Record<string, string> }) =>
            route.call<ErrorBody>("POST", route.path, {
              ...(token === undefined ? {} : { token }),
              ...options,
            });
          // The same body with its type is accepted: only the missing header is refused.
          expect((await call({ json: json() })).status, route.path).toBeLessThan(300);
          const bytes = () => Buffer.from(JSON.stringify(json()));
          const sized = await call({ body: bytes() });
          expect([sized.status, sized.body], `${route.path} with Content-Length`).toEqual([415, unsupported]);
          const chunked = await call({ body: bytes(), headers: { "transfer-encoding": "chunked" } });
          expect([chunked.status, chunked.body], `${route.path} chunked`).toEqual([415, unsupported]);
          const empty = await call({});
          expect([empty.status, empty.body], `${route.path} without a body`).toEqual([400, required]);
        }
        // Neither Content-Length nor Transfer-Encoding: no body, whatever node's client would add.
        const bare = await rawRequest(
          t.adminUrl,
          `POST /admin/api-keys HTTP/1.1\r\nHost: tollgate\r\nAuthorization: Bearer ${ADMIN_TOKEN}\r\nConnection: close\r\n\r\n`,
        );
        expect([bare.status, JSON.parse(bare.body)]).toEqual([400, required]);
      });

      it("answers 401 with a Bearer challenge, adding invalid_token only when a bad token was sent", async () => {
        const none = await t.api<ErrorBody>("GET", "/me");
        expect(none.status).toBe(401);
        expect(none.headers.get("www-authenticate")).toBe('Bearer realm="tollgate"');
        expect(none.body).toEqual({ error: "unauthorized", message: "Authentication required" });

        for (const token of ["garbage", "a.b.c", forged()]) {
          const bad = await t.api<ErrorBody>("GET", "/me", { token });
          expect(bad.status, token).toBe(401);
          expect(bad.headers.get("www-authenticate"), token).toMatch(
            /^Bearer realm="tollgate", error="invalid_token", error_description="[^"]+"$/,
          );
          expect(bad.body.error).toBe("unauthorized");
        }
      });
    });

    describe("service endpoints", () => {
      it("answers /health and /ready on both listeners, and a JSON 404 for unknown routes", async () => {
        for (const call of [t.api, t.admin]) {
          const health = await call("GET", "/health");
          expect(health.status).toBe(200);
          expect(health.body).toEqual({ status: "ok" });
          const ready = await call("GET", "/ready");
          expect(ready.status).toBe(200);
          expect(ready.body).toEqual({ status: "ready", store: t.store.kind });
          const missing = await call("GET", "/no/such/route");
          expect(missing.status).toBe(404);
          expect(missing.body.error).toBe("not_found");
        }
      });
    });

    describe("sessions across devices", () => {
      /** One user logged in on phone, laptop and tablet from three addresses. */
      const threeDevices = async () => {
        const user = await t.newUser();
        const devices = ["phone", "laptop", "tablet"];
        const logins: LoginBody[] = [];
        for (const [i, device] of devices.entries()) {
          logins.push(await t.loginOk(user.username, user.password, { device, ip: `198.51.100.${i + 10}` }));
        }
        return { user, logins, tokens: logins.map((l) => l.access_token) };
      };

      it("lists three devices with exactly one marked current", async () => {
        const { logins, tokens } = await threeDevices();
        const listed = await sessionsOf(tokens[1] as string);
        expect(listed.total).toBe(3);
        expect(listed.sessions).toHaveLength(3);
        for (const s of listed.sessions) expect(Object.keys(s).sort()).toEqual(SESSION_FIELDS);
        const byDevice = Object.fromEntries(listed.sessions.map((s) => [s.device_name, s]));
        for (const [i, device] of ["phone", "laptop", "tablet"].entries()) {
          expect(byDevice[device]).toMatchObject({
            session_id: logins[i]?.session_id,
            ip: `198.51.100.${i + 10}`,
            user_agent: "identity-contract/1.0",
            is_current: device === "laptop",
          });
          expect(byDevice[device]?.created_at).toMatch(ISO_TIME);
          expect(byDevice[device]?.last_accessed).toMatch(ISO_TIME);
        }
        expect(listed.sessions.filter((s) => s.is_current)).toHaveLength(1);
      });

      it("stores the device name and user agent cleaned of control characters and bounded in length", async () => {
        const user = await t.newUser();
        const login = await t.loginOk(user.username, user.password, {
          device: `\tmy\tphone ${"d".repeat(300)}`,
          userAgent: `agent ${"u".repeat(1_000)}`,
        });
        const [session] = (await sessionsOf(login.access_token)).sessions;
        expect(session?.device_name).toBe(`myphone ${"d".repeat(92)}`);
        expect(session?.user_agent).toBe(`agent ${"u".repeat(250)}`);
        expect((await me(login.access_token)).body.device).toBe(session?.device_name);
        const unnamed = await t.loginOk(user.username, user.password);
        expect((await me(unnamed.access_token)).body.device).toBe("unknown");
      });

      it("logs out one device: its token gets 401 on the next request while the others still work", async () => {
        const { tokens } = await threeDevices();
        const [phone, laptop, tablet] = tokens as [string, string, string];
        const out = await t.api("POST", "/auth/logout", { token: phone });
        expect(out.status).toBe(200);
        expect(out.body).toEqual({ message: "Logged out from this device" });
        expect(await statuses([phone, laptop, tablet])).toEqual([401, 200, 200]);
        expect(await t.check(phone)).toMatchObject({ kind: "deny", status: 401, reason: "revoked" });
        expect(await t.check(laptop)).toMatchObject({ kind: "allow" });
        expect((await sessionsOf(laptop)).total).toBe(2);
        expect((await t.api("POST", "/auth/logout", { token: phone })).status).toBe(401);
      });

      it("logs out whatever body a client sends along, as logout reads none (curl -d sends a form)", async () => {
        const { tokens } = await threeDevices();
        const form = { "content-type": "application/x-www-form-urlencoded" };
        const one = await t.api("POST", "/auth/logout", {
          token: tokens[0] as string,
          body: "{}",
          headers: form,
        });
        expect([one.status, one.body]).toEqual([200, { message: "Logged out from this device" }]);
        const all = await t.api("POST", "/auth/logout-all", { token: tokens[1] as string, body: "x" });
        expect([all.status, all.body]).toEqual([200, { message: "Logged out from 2 devices", revoked: 2 }]);
        expect(await statuses(tokens)).toEqual([401, 401, 401]);
      });

      it("logs out from every device and leaves each of them at 401", async () => {
        const { tokens } = await threeDevices();
        const out = await t.api("POST", "/auth/logout-all", { token: tokens[0] as string });
        expect(out.status).toBe(200);
        expect(out.body).toEqual({ message: "Logged out from 3 devices", revoked: 3 });
        expect(await statuses(tokens)).toEqual([401, 401, 401]);
        for (const token of tokens) {
          expect(await t.check(token)).toMatchObject({ kind: "deny", status: 401 });
        }
      });

      it("revokes another of the caller's sessions, effective on that device's next request", async () => {
        const { logins, tokens } = await threeDevices();
        const [phone, laptop, tablet] = tokens as [string, string, string];
        const sid = logins[2]?.session_id as string;
        const reply = await t.api("POST", `/auth/sessions/${sid}/revoke`, { token: phone });
        expect(reply.status).toBe(200);
        expect(reply.body).toEqual({ message: "Session revoked", session_id: sid });
        expect(await statuses([phone, laptop, tablet])).toEqual([200, 200, 401]);
        expect(await t.check(tablet)).toMatchObject({ kind: "deny", status: 401 });
        const left = await sessionsOf(phone);
        expect(left.sessions.map((s) => s.device_name).sort()).toEqual(["laptop", "phone"]);
      });

      it("refuses with 400 to revoke the current session, which stays valid", async () => {
        const { logins, tokens } = await threeDevices();
        const reply = await t.api("POST", `/auth/sessions/${logins[0]?.session_id}/revoke`, {
          token: tokens[0] as string,
        });
        expect(reply.status).toBe(400);
        expect(reply.body.error).toBe("bad_request");
        expect(await statuses(tokens)).toEqual([200, 200, 200]);
      });

      it("answers 404 for a session that is not the caller's and leaves its owner's session alone", async () => {
        const { tokens } = await threeDevices();
        const other = await t.loginOk("bob_pro", "secret");
        for (const sid of [other.session_id, "no-such-session", "%2E%2E", "x".repeat(65), "a%20b"]) {
          const reply = await t.api("POST", `/auth/sessions/${sid}/revoke`, { token: tokens[0] as string });
          expect(reply.status, sid).toBe(404);
          expect(reply.body.error, sid).toBe("not_found");
        }
        expect((await me(other.access_token)).status).toBe(200);
      });

      it("keeps at most five sessions, revoking the oldest on the sixth login", async () => {
        const user = await t.newUser();
        const logins: LoginBody[] = [];
        for (let i = 0; i < 6; i += 1) {
          logins.push(await t.loginOk(user.username, user.password, { device: `device-${i}` }));
        }
        const tokens = logins.map((l) => l.access_token);
        expect(await statuses(tokens)).toEqual([401, 200, 200, 200, 200, 200]);
        const listed = await sessionsOf(tokens[5] as string);
        expect(listed.total).toBe(5);
        expect(listed.sessions.map((s) => s.session_id).sort()).toEqual(
          logins
            .slice(1)
            .map((l) => l.session_id)
            .sort(),
        );
      });

      it("leaves exactly five sessions after twenty concurrent logins of one user", async () => {
        const user = await t.newUser();
        const logins = await Promise.all(
          Array.from({ length: 20 }, (_, i) => t.loginOk(user.username, user.password, { device: `d${i}` })),
        );
        const codes = await statuses(logins.map((l) => l.access_token));
        expect(codes.filter((c) => c === 200)).toHaveLength(5);
        expect(codes.filter((c) => c === 401)).toHaveLength(15);
        const survivor = logins[codes.indexOf(200)]?.access_token as string;
        const listed = await sessionsOf(survivor);
        expect(listed.total).toBe(5);
        expect(listed.sessions.map((s) => s.session_id).sort()).toEqual(
          logins
            .filter((_, i) => codes[i] === 200)
            .map((l) => l.session_id)
            .sort(),
        );
        const admin = await t.admin<SessionsBody>("GET", `/admin/users/${user.id}/sessions`, {
          token: ADMIN_TOKEN,
        });
        expect(admin.body.total).toBe(5);
      });
    });

    describe("username lockout", () => {
      /** Ten wrong passwords for the name, each from an address of its own. */
      const failTenTimes = async (username: string, on: InProcess = t) => {
        for (let i = 0; i < 10; i += 1) {
          const failed = await on.login(username, `wrong-${i}`, { ip: `203.0.113.${i + 1}` });
          expect(failed.status, `attempt ${i + 1}`).toBe(401);
        }
      };
      const lockedOut = async (username: string, rightPassword: string) => {
        await failTenTimes(username);
        return t.login(username, rightPassword, { ip: "192.0.2.200" });
      };
      const admin = (method: string, path: string, json?: unknown) =>
        t.admin(method, path, { token: ADMIN_TOKEN, ...(json === undefined ? {} : { json }) });

      it("answers 429 with Retry-After to the 11th attempt within the window, even with the right password", async () => {
        const user = await t.newUser();
        const reply = await lockedOut(user.username, user.password);
        expect(reply.status).toBe(429);
        expect(reply.body).toEqual({
          error: "rate_limit_exceeded",
          message: "Too many failed logins for this username; try again later",
        });
        const retryAfter = Number(reply.headers.get("retry-after"));
        expect(Number.isInteger(retryAfter)).toBe(true);
        expect(retryAfter).toBeGreaterThanOrEqual(890);
        expect(retryAfter).toBeLessThanOrEqual(900);
        // The lockout is per username: other users are not affected.
        expect((await t.login("bob_pro", "secret", { ip: "192.0.2.200" })).status).toBe(200);
      });

      it("locks an unknown username the same way, so lockouts reveal nothing", async () => {
        const reply = await lockedOut(uniqueName("ghost"), "anything");
        expect(reply.status).toBe(429);
        expect(reply.headers.get("retry-after")).toMatch(/^\d+$/);
      });

      it("evaluates at most 10 of a burst of concurrent guesses and answers the rest 429", async () => {
        const user = await t.newUser();
        const replies = await Promise.all(
          Array.from({ length: 25 }, (_, i) =>
            t.login(user.username, `guess-${i}`, { ip: `203.0.113.${i + 100}` }),
          ),
        );
        const codes = replies.map((r) => r.status);
        expect(codes.filter((c) => c === 401)).toHaveLength(10);
        expect(codes.filter((c) => c === 429)).toHaveLength(15);
        expect((await t.login(user.username, user.password, { ip: "192.0.2.201" })).status).toBe(429);
      });

      it("frees a locked username on DELETE /admin/users/{id}/lockout with 204, with ten attempts again", async () => {
        // A name with capitals and non-ASCII letters: the lockout cleared is the one the logins counted.
        const username = uniqueName("Ünïcode_Ådmin");
        const password = "a long password";
        const created = await admin("POST", "/admin/users", { username, password, tier: "free" });
        expect(created.status).toBe(201);
        const id = (created.body as unknown as { user_id: string }).user_id;
        expect((await lockedOut(username, password)).status).toBe(429);
        // Every form of one name is one name: the same letters in another case are locked too.
        expect((await t.login(username.toLowerCase(), password)).status).toBe(429);

        const cleared = await admin("DELETE", `/admin/users/${id}/lockout`);
        expect(cleared.status).toBe(204);
        expect(cleared.body).toBe("");
        // The whole window is forgotten, not one attempt of it: ten more failures before the next lock.
        await failTenTimes(username);
        expect((await t.login(username, password, { ip: "192.0.2.200" })).status).toBe(429);
        expect((await admin("DELETE", `/admin/users/${id}/lockout`)).status).toBe(204);
        expect((await t.login(username, password, { ip: "192.0.2.200" })).status).toBe(200);

        for (const unknown of ["usr_0000000000000000", "bad%20id"]) {
          const missing = await admin("DELETE", `/admin/users/${unknown}/lockout`);
          expect(missing.status, unknown).toBe(404);
          expect(missing.body).toMatchObject({ error: "not_found" });
        }
      });

      it("frees a locked username when an admin sets a new password, and only that username", async () => {
        const user = await t.newUser();
        const other = await t.newUser();
        expect((await lockedOut(user.username, user.password)).status).toBe(429);
        expect((await lockedOut(other.username, other.password)).status).toBe(429);
        const changed = await admin("PUT", `/admin/users/${user.id}/password`, {
          password: "the new password",
        });
        expect(changed.status).toBe(200);
        expect((await t.login(user.username, "the new password", { ip: "192.0.2.200" })).status).toBe(200);
        expect((await t.login(other.username, other.password, { ip: "192.0.2.200" })).status).toBe(429);
      });

      it("frees a username locked while its user was disabled once the user is enabled again", async () => {
        const user = await t.newUser();
        const disable = (disabled: boolean) => admin("PUT", `/admin/users/${user.id}/disabled`, { disabled });
        expect((await disable(true)).status).toBe(200);
        // Right passwords all fail while disabled, and count like wrong ones.
        for (let i = 0; i < 10; i += 1) {
          const refused = await t.login(user.username, user.password, { ip: `203.0.113.${i + 1}` });
          expect(refused.status).toBe(401);
        }
        expect((await t.login(user.username, user.password)).status).toBe(429);
        expect((await disable(false)).status).toBe(200);
        expect((await t.login(user.username, user.password)).status).toBe(200);
      });

      it("does not lock a new user out for guesses at its name made before it existed", async () => {
        const username = uniqueName("future");
        expect((await lockedOut(username, "anything")).status).toBe(429);
        const password = "a long password";
        expect((await admin("POST", "/admin/users", { username, password, tier: "free" })).status).toBe(201);
        expect((await t.login(username, password)).status).toBe(200);
      });

      it("keeps a lockout through DELETE /admin/users/{id}/limits, which clears request windows only", async () => {
        const user = await t.newUser();
        expect((await lockedOut(user.username, user.password)).status).toBe(429);
        expect((await admin("DELETE", `/admin/users/${user.id}/limits`)).status).toBe(200);
        expect((await t.login(user.username, user.password)).status).toBe(429);
      });

      it("locks by LOGIN_LOCKOUT, and a policy that lets one address log in 1000 times does not lift it", async () => {
        const dir = mkdtempSync(join(tmpdir(), "tollgate-lockout-"));
        const policyFile = join(dir, "policy.yaml");
        const generous = DEFAULT_POLICY_YAML.replace("login: 10/15m", "login: 1000/15m");
        expect(generous).not.toBe(DEFAULT_POLICY_YAML);
        writeFileSync(policyFile, generous);

        // An office behind one NAT: the default lockout (10 in 15 minutes) holds whatever the policy.
        const office = await start({ POLICY_FILE: policyFile });
        const user = await office.newUser();
        const codes: number[] = [];
        for (let i = 0; i < 25; i += 1)
          codes.push((await office.login(user.username, `wrong-${i}`, { ip: "198.51.100.50" })).status);
        expect(codes).toEqual([...Array(10).fill(401), ...Array(15).fill(429)]);
        const right = await office.login(user.username, user.password, { ip: "198.51.100.50" });
        expect(right.status).toBe(429);
        expect(Number(right.headers.get("retry-after"))).toBeGreaterThan(890);

        // Its own setting, under the same generous policy: three failures in a minute.
        const strict = await start({ POLICY_FILE: policyFile, LOGIN_LOCKOUT: "3/1m" });
        const other = await strict.newUser();
        for (let i = 0; i < 3; i += 1) {
          const failed = await strict.login(other.username, "wrong", { ip: `203.0.113.${i + 1}` });
          expect(failed.status).toBe(401);
        }
        const locked = await strict.login(other.username, other.password, { ip: "192.0.2.9" });
        expect(locked.status).toBe(429);
        const retryAfter = Number(locked.headers.get("retry-after"));
        expect(retryAfter).toBeGreaterThan(50);
        expect(retryAfter).toBeLessThanOrEqual(60);
      });

      it("lets a user with fewer than 10 failed attempts log in", async () => {
        const user = await t.newUser();
        for (let i = 0; i < 9; i += 1) {
          expect((await t.login(user.username, "wrong", { ip: `203.0.113.${i + 50}` })).status).toBe(401);
        }
        expect((await t.login(user.username, user.password)).status).toBe(200);
      });
    });

    describe("admin API", () => {
      const admin = <T = ErrorBody>(method: string, path: string, json?: unknown) =>
        t.admin<T>(method, path, { token: ADMIN_TOKEN, ...(json === undefined ? {} : { json }) });

      it("answers 401 to a missing or wrong admin token on every endpoint, and 200 to the right one", async () => {
        const endpoints: [string, string, unknown?][] = [
          ["POST", "/admin/users", { username: uniqueName("never"), password: "long enough", tier: "free" }],
          ["POST", "/admin/users/demo-alice/revoke"],
          ["GET", "/admin/users/demo-alice/sessions"],
          ["PUT", "/admin/users/demo-alice/tier", { tier: "enterprise" }],
          ["PUT", "/admin/users/demo-alice/disabled", { disabled: true }],
          ["GET", "/admin/users/demo-alice/limits"],
          ["DELETE", "/admin/users/demo-alice/limits"],
          ["DELETE", "/admin/users/demo-alice/lockout"],
        ];
        const alice = await t.loginOk("alice", "secret");
        for (const [method, path, json] of endpoints) {
          const body = json === undefined ? {} : { json };
          const missing = await t.admin(method, path, body);
          expect(missing.status, `${method} ${path}`).toBe(401);
          expect(missing.body.error).toBe("unauthorized");
          expect(missing.headers.get("www-authenticate")).toBe('Bearer realm="tollgate"');
          for (const wrong of ["z".repeat(32), `${ADMIN_TOKEN}y`, ADMIN_TOKEN.slice(1), JWT_SECRET]) {
            const reply = await t.admin(method, path, { ...body, token: wrong });
            expect(reply.status, `${method} ${path} with a wrong token`).toBe(401);
            expect(reply.headers.get("www-authenticate")).toMatch(
              /^Bearer realm="tollgate", error="invalid_token"/,
            );
          }
          const basic = await t.admin(method, path, {
            ...body,
            headers: { authorization: `Basic ${ADMIN_TOKEN}` },
          });
          expect(basic.status).toBe(401);
        }
        // Nothing above reached a handler: alice is still free, enabled and logged in.
        expect((await me(alice.access_token)).body).toMatchObject({ tier: "free" });
        expect((await admin("GET", "/admin/users/demo-alice/sessions")).status).toBe(200);
        expect((await t.api("GET", "/admin/users/demo-alice/sessions", { token: ADMIN_TOKEN })).status).toBe(
          404,
        );
      });

      it("creates a user with 201, then answers 409 for the same username and 400 for a bad body", async () => {
        const username = uniqueName("created");
        const created = await admin<{ user_id: string; username: string; tier: string }>(
          "POST",
          "/admin/users",
          {
            username,
            password: "a long password",
            tier: "pro",
          },
        );
        expect(created.status).toBe(201);
        expect(Object.keys(created.body).sort()).toEqual(["tier", "user_id", "username"]);
        expect(created.body).toMatchObject({ username, tier: "pro" });
        expect(created.body.user_id).toMatch(/^[A-Za-z0-9_-]{1,64}$/);
        expect(await t.loginOk(username, "a long password")).toMatchObject({
          user_id: created.body.user_id,
          tier: "pro",
        });

        const again = await admin("POST", "/admin/users", {
          username,
          password: "another password",
          tier: "free",
        });
        expect(again.status).toBe(409);
        expect(again.body.error).toBe("conflict");
        // The first user keeps their password.
        expect((await t.login(username, "another password")).status).toBe(401);

        const bad: unknown[] = [
          { username: uniqueName("u"), password: "a long password", tier: "platinum" },
          { username: uniqueName("u"), password: "a long password", tier: "anonymous" },
          { username: uniqueName("u"), password: "short", tier: "free" },
          { username: "", password: "a long password", tier: "free" },
          { username: uniqueName("u"), tier: "free" },
          { username: uniqueName("u"), password: "a long password", tier: "free", admin: true },
          ["not", "an", "object"],
        ];
        for (const json of bad) {
          const reply = await admin("POST", "/admin/users", json);
          expect(reply.status, JSON.stringify(json)).toBe(400);
          expect(reply.body.error).toBe("bad_request");
        }
        const broken = await t.admin("POST", "/admin/users", {
          token: ADMIN_TOKEN,
          body: "{nope",
          headers: { "content-type": "application/json" },
        });
        expect(broken.status).toBe(400);
        expect(broken.body.error).toBe("invalid_json");
      });

      it("lists a user's sessions for the admin, and answers 404 for an unknown user", async () => {
        const user = await t.newUser();
        const first = await t.loginOk(user.username, user.password, { device: "one" });
        const second = await t.loginOk(user.username, user.password, { device: "two" });
        const reply = await admin<SessionsBody>("GET", `/admin/users/${user.id}/sessions`);
        expect(reply.status).toBe(200);
        expect(reply.body.total).toBe(2);
        expect(reply.body.sessions.map((s) => s.session_id).sort()).toEqual(
          [first.session_id, second.session_id].sort(),
        );
        for (const s of reply.body.sessions) expect(s).not.toHaveProperty("is_current");
        for (const id of ["usr_0000000000000000", "bad%20id"]) {
          const missing = await admin("GET", `/admin/users/${id}/sessions`);
          expect(missing.status, id).toBe(404);
          expect(missing.body.error).toBe("not_found");
        }
      });

      it("revokes every session of a user, effective on each device's next request", async () => {
        const user = await t.newUser();
        const a = await t.loginOk(user.username, user.password);
        const b = await t.loginOk(user.username, user.password);
        const reply = await admin("POST", `/admin/users/${user.id}/revoke`);
        expect(reply.status).toBe(200);
        expect(reply.body).toEqual({ message: "Revoked 2 sessions", revoked: 2 });
        expect(await statuses([a.access_token, b.access_token])).toEqual([401, 401]);
        expect(await t.check(a.access_token)).toMatchObject({ kind: "deny", status: 401 });
        expect((await admin("POST", "/admin/users/usr_0000000000000000/revoke")).status).toBe(404);
        // A new login works afterwards.
        expect((await me((await t.loginOk(user.username, user.password)).access_token)).status).toBe(200);
      });

      it("changes the tier of an existing session from its next request on, without a new login", async () => {
        const user = await t.newUser("free");
        const login = await t.loginOk(user.username, user.password);
        expect((await me(login.access_token)).body.tier).toBe("free");
        expect(await t.check(login.access_token)).toMatchObject({
          kind: "allow",
          identity: { tier: "free" },
          limit: { limit: 20 },
        });

        const changed = await admin("PUT", `/admin/users/${user.id}/tier`, { tier: "pro" });
        expect(changed.status).toBe(200);
        expect(changed.body).toMatchObject({ user_id: user.id, tier: "pro" });
        expect((await me(login.access_token)).body.tier).toBe("pro");
        expect(await t.check(login.access_token)).toMatchObject({
          kind: "allow",
          identity: { userId: user.id, tier: "pro" },
          limit: { tier: "pro", limit: 200 },
        });

        const unknownTier = await admin("PUT", `/admin/users/${user.id}/tier`, { tier: "platinum" });
        expect(unknownTier.status).toBe(400);
        expect(unknownTier.body.error).toBe("bad_request");
        expect((await admin("PUT", `/admin/users/${user.id}/tier`, { tier: "anonymous" })).status).toBe(400);
        expect((await admin("PUT", `/admin/users/${user.id}/tier`, {})).status).toBe(400);
        const unknownUser = await admin("PUT", "/admin/users/usr_0000000000000000/tier", { tier: "pro" });
        expect(unknownUser.status).toBe(404);
        expect(unknownUser.body.error).toBe("not_found");
        expect((await me(login.access_token)).body.tier).toBe("pro");
      });

      it("reports a user's windows per category and clears them on DELETE", async () => {
        const user = await t.newUser("free");
        const login = await t.loginOk(user.username, user.password);
        for (let i = 0; i < 3; i += 1) {
          expect(await t.check(login.access_token)).toMatchObject({ kind: "allow", limit: { used: i + 1 } });
        }
        await t.check(login.access_token, "/api/products");
        const before = Math.floor(Date.now() / 1000);
        const limits = await admin<LimitsBody>("GET", `/admin/users/${user.id}/limits`);
        expect(limits.status).toBe(200);
        expect(limits.body).toMatchObject({ user_id: user.id, tier: "free" });
        expect(Object.keys(limits.body.limits).sort()).toEqual(["account", "general", "orders", "search"]);
        expect(limits.body.limits.search).toMatchObject({ limit: 20, used: 3, remaining: 17 });
        expect(limits.body.limits.general).toMatchObject({ limit: 100, used: 1, remaining: 99 });
        expect(limits.body.limits.orders).toMatchObject({ limit: 10, used: 0, remaining: 10 });
        const reset = limits.body.limits.search?.reset as number;
        expect(reset).toBeGreaterThanOrEqual(before + 3_600 - 5);
        expect(reset).toBeLessThanOrEqual(before + 3_600 + 5);

        const cleared = await admin("DELETE", `/admin/users/${user.id}/limits`);
        expect(cleared.status).toBe(200);
        const after = await admin<LimitsBody>("GET", `/admin/users/${user.id}/limits`);
        expect(after.body.limits.search).toMatchObject({ limit: 20, used: 0, remaining: 20 });
        expect(after.body.limits.general).toMatchObject({ used: 0, remaining: 100 });
        expect(await t.check(login.access_token)).toMatchObject({ kind: "allow", limit: { used: 1 } });

        expect((await admin("GET", "/admin/users/usr_0000000000000000/limits")).status).toBe(404);
        expect((await admin("DELETE", "/admin/users/usr_0000000000000000/limits")).status).toBe(404);
      });

      it("disables a user: their token gets 401 on the next request and their login fails", async () => {
        const user = await t.newUser();
        const login = await t.loginOk(user.username, user.password);
        const off = await admin("PUT", `/admin/users/${user.id}/disabled`, { disabled: true });
        expect(off.status).toBe(200);
        expect(off.body).toEqual({ user_id: user.id, disabled: true, revoked: 1, api_keys_blocked: 0 });
        const denied = await me(login.access_token);
        expect(denied.status).toBe(401);
        expect(denied.headers.get("www-authenticate")).toMatch(/error="invalid_token"/);
        expect(await t.check(login.access_token)).toMatchObject({ kind: "deny", status: 401 });
        const refused = await t.login(user.username, user.password);
        expect(refused.status).toBe(401);
        expect(refused.body).toEqual({ error: "unauthorized", message: "Invalid username or password" });

        expect((await admin("PUT", `/admin/users/${user.id}/disabled`, { disabled: "yes" })).status).toBe(
          400,
        );
        const on = await admin("PUT", `/admin/users/${user.id}/disabled`, { disabled: false });
        expect(on.body).toEqual({ user_id: user.id, disabled: false, revoked: 0, api_keys_unblocked: 0 });
        // The old token stays dead: disabling ended its session.
        expect((await me(login.access_token)).status).toBe(401);
        expect((await t.login(user.username, user.password)).status).toBe(200);
        expect(
          (await admin("PUT", "/admin/users/usr_0000000000000000/disabled", { disabled: true })).status,
        ).toBe(404);
      });
    });

    describe("session lifetimes", () => {
      it("forgets a session left unused longer than the idle lifetime", async () => {
        const short = await start({ SESSION_IDLE_TTL_SECONDS: "1" });
        const idle = await short.loginOk("alice", "secret", { device: "idle" });
        const other = await short.loginOk("alice", "secret", { device: "other" });
        expect((await short.api("GET", "/me", { token: idle.access_token })).status).toBe(200);
        await sleep(1_300);
        const later = await short.loginOk("alice", "secret", { device: "later" });
        expect((await short.api("GET", "/me", { token: idle.access_token })).status).toBe(401);
        expect(await short.check(other.access_token)).toMatchObject({ kind: "deny", status: 401 });
        const listed = await short.api<SessionsBody>("GET", "/auth/sessions", { token: later.access_token });
        expect(listed.body.sessions.map((s) => s.device_name)).toEqual(["later"]);
      });

      it("keeps a session alive past the idle lifetime while it is used", async () => {
        const short = await start({ SESSION_IDLE_TTL_SECONDS: "1" });
        const login = await short.loginOk("alice", "secret");
        const began = Date.now();
        let uses = 0;
        while (Date.now() - began < 2_200) {
          await sleep(450);
          const api = uses % 2 === 0;
          // The public API and the check path both renew the session.
          if (api) expect((await short.api("GET", "/me", { token: login.access_token })).status).toBe(200);
          else expect(await short.check(login.access_token)).toMatchObject({ kind: "allow" });
          uses += 1;
        }
        expect(uses).toBeGreaterThanOrEqual(4);
      });

      it("ends a session at its absolute age even while it is used", async () => {
        const short = await start({ SESSION_IDLE_TTL_SECONDS: "30", SESSION_MAX_AGE_SECONDS: "2" });
        const login = await short.loginOk("alice", "secret");
        const began = Date.now();
        for (let i = 0; i < 3; i += 1) {
          await sleep(450);
          expect((await short.api("GET", "/me", { token: login.access_token })).status).toBe(200);
        }
        expect(Date.now() - began).toBeLessThan(1_900);
        await sleep(2_300 - (Date.now() - began));
        expect((await short.api("GET", "/me", { token: login.access_token })).status).toBe(401);
        expect(await short.check(login.access_token)).toMatchObject({ kind: "deny", status: 401 });
      });

      it("counts only live sessions towards the cap and in logout-all", async () => {
        const short = await start({ SESSION_IDLE_TTL_SECONDS: "1", MAX_SESSIONS_PER_USER: "3" });
        const kept = await short.loginOk("alice", "secret", { device: "kept" });
        await short.loginOk("alice", "secret", { device: "idle-1" });
        await short.loginOk("alice", "secret", { device: "idle-2" });
        const base = Date.now();
        const useKept = async () =>
          expect((await short.api("GET", "/me", { token: kept.access_token })).status).toBe(200);
        // The oldest session stays in use while the two others idle out.
        for (let i = 0; i < 3; i += 1) {
          await useKept();
          await sleep(Math.min(450, base + 1_300 - Date.now()));
        }
        await sleep(base + 1_300 - Date.now());
        const next = await short.loginOk("alice", "secret", { device: "next" });
        await useKept();
        const out = await short.api("POST", "/auth/logout-all", { token: next.access_token });
        expect(out.body).toEqual({ message: "Logged out from 2 devices", revoked: 2 });
      });
    });
  });
  describeUserLifecycleContract(name, makeStore);
  describeUsernameContract(name, makeStore);
}

/** A well-formed token with tollgate's claims, signed with someone else's secret. */
function forged(): string {
  const encode = (value: object) => Buffer.from(JSON.stringify(value)).toString("base64url");
  const now = Math.floor(Date.now() / 1000);
  const claims = {
    sub: "demo-alice",
    sid: "a".repeat(22),
    tier: "free",
    iat: now,
    exp: now + 60,
    iss: "tollgate",
  };
  const unsigned = `${encode({ alg: "HS256", typ: "JWT" })}.${encode(claims)}`;
  const signature = createHmac("sha256", "z".repeat(32)).update(unsigned).digest("base64url");
  return `${unsigned}.${signature}`;
}
