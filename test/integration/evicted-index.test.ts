// A user's session index dropped by Redis (an evicting maxmemory-policy) takes the sessions it listed with it.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type InProcessOnRedis, startInProcess } from "../support/in-process.js";

let t: InProcessOnRedis;
beforeAll(async () => {
  t = await startInProcess({ demoUsers: false });
});
afterAll(async () => {
  await t?.close();
});

/**
 * What `volatile-lru` did to a real Redis under `maxmemory` (docs/failure-modes.md): the index, which
 * only logins and revocations read, went while the session that checks kept renewing stayed.
 */
const evictIndex = (userId: string) => t.redis.del(`${t.prefix}{u:${userId}}:sessions`);

async function loggedIn(tier = "free") {
  const user = await t.newUser(tier);
  const { access_token: token, session_id: sessionId } = await t.loginOk(user.username, user.password);
  expect(await t.check(token)).toMatchObject({ kind: "allow" });
  return { user, token, sessionId };
}

const admin = (method: string, path: string, json?: unknown) =>
  t.admin<Record<string, unknown>>(method, path, {
    token: t.adminToken,
    ...(json === undefined ? {} : { json }),
  });

describe("a session whose user's index Redis evicted", () => {
  it("is refused 401 at the next check, and its hash is deleted", async () => {
    const { user, token, sessionId } = await loggedIn();
    await evictIndex(user.id);
    expect(await t.check(token)).toMatchObject({ kind: "deny", status: 401, reason: "revoked" });
    expect(await t.redis.exists(`${t.prefix}{u:${user.id}}:s:${sessionId}`)).toBe(0);
  });

  it("is refused by the public API too", async () => {
    const { user, token } = await loggedIn();
    await evictIndex(user.id);
    const me = await t.api("GET", "/me", { token });
    expect(me.status).toBe(401);
  });

  it("never outlives a revocation, new password, disable or deletion that could not find it", async () => {
    const changes = [
      ["POST", "revoke", undefined],
      ["PUT", "password", { password: "another-password-1" }],
      ["PUT", "disabled", { disabled: true }],
      ["DELETE", "", undefined],
    ] as const;
    for (const [method, path, json] of changes) {
      const { user, token } = await loggedIn();
      await evictIndex(user.id);
      const answer = await admin(method, `/admin/users/${user.id}${path === "" ? "" : `/${path}`}`, json);
      // It found no session to revoke (every one of these answers 200 and says so)…
      expect(answer.status, `${method} ${path}`).toBe(200);
      expect(answer.body, `${method} ${path}`).toMatchObject({ revoked: 0 });
      // …and the session it missed passes no more.
      expect(await t.check(token), `${method} ${path}`).toMatchObject({ kind: "deny", status: 401 });
    }
  });

  it("leaves the user's other sessions, still listed, alone", async () => {
    const { user, token } = await loggedIn();
    const second = await t.loginOk(user.username, user.password);
    await t.redis.zrem(`${t.prefix}{u:${user.id}}:sessions`, second.session_id);
    expect(await t.check(second.access_token)).toMatchObject({ kind: "deny", status: 401 });
    expect(await t.check(token)).toMatchObject({ kind: "allow" });
  });
});
