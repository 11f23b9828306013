// The user lifecycle part of the identity contract: password changes, deletion, lookup and listing,
// USERS_FILE and demo users across restarts, and logins racing an admin change. Memory and Redis alike.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { newApiKey } from "../../src/auth/api-keys.js";
import { hashPassword } from "../../src/auth/passwords.js";
import { revokeOrphanKeys } from "../../src/auth/user-keys.js";
import { removeUsers } from "../../src/auth/user-removal.js";
import { demoUsers, loadUsers, type UsersFileEntry } from "../../src/auth/users-file.js";
import { removeDemoUsers, syncUsersFile } from "../../src/auth/users-sync.js";
import { loadPolicy } from "../../src/policy/policy.js";
import { createLogger } from "../../src/process/logger.js";
import { type Rule, userSubject } from "../../src/ratelimit/types.js";
import type { Store } from "../../src/store/store.js";
import type { ErrorBody, LoginBody, MeBody } from "../support/http-client.mjs";
import { fileTarget, type InProcess, startInProcess, uniqueName } from "../support/in-process.js";
import { ADMIN_TOKEN } from "../support/secrets.mjs";

type UserBody = { user_id: string; username: string; tier: string; disabled: boolean; source: string };
type PageBody = { users: UserBody[]; next_cursor: string | null };

const LIFETIMES = { idleMs: 60_000, maxAgeMs: 60_000, maxPerUser: 5 };
const silent = createLogger("silent");
const SEARCH = { category: "search", rule: loadPolicy(undefined).tiers.get("free")?.get("search") as Rule };
/** One request of the user's counted in its free-tier search window, and what that window has used. */
const spend = (store: Store, userId: string) => store.limiter.hit(userSubject(userId), [SEARCH]);
const used = async (store: Store, userId: string) =>
  (await store.limiter.peek(userSubject(userId), SEARCH)).map((w) => w.used);

export function describeUserLifecycleContract(name: string, makeStore: () => Store | Promise<Store>): void {
  describe(`user lifecycle contract: ${name}`, () => {
    let t: InProcess;
    beforeAll(async () => {
      t = await startInProcess({ store: await makeStore(), env: { LOG_LEVEL: "silent" } });
    });
    afterAll(async () => {
      await t.close();
      await t.store.close();
    });

    const admin = <T = ErrorBody>(method: string, path: string, json?: unknown) =>
      t.admin<T>(method, path, { token: ADMIN_TOKEN, ...(json === undefined ? {} : { json }) });
    const me = (token: string) => t.api<MeBody>("GET", "/me", { token });
    const lockout = () => fileTarget(t.store).lockout;
    /** A "restart": start-up applies the same file (or demo list) to the same store again. */
    const restartWith = (entries: UsersFileEntry[]) => syncUsersFile(fileTarget(t.store), entries, silent);
    /** Ten wrong passwords for the name, each from an address of its own (LOGIN_LOCKOUT is 10/15m). */
    const lockOut = async (username: string) => {
      for (let i = 0; i < 10; i += 1) {
        const failed = await t.login(username, `wrong-${i}`, { ip: `203.0.113.${i + 1}` });
        expect(failed.status, `attempt ${i + 1}`).toBe(401);
      }
    };
    const loginStatus = async (username: string, password: string) =>
      (await t.login(username, password, { ip: "192.0.2.201" })).status;
    /** A check with an API key, as the proxy asks it. */
    const keyCheck = (key: string) =>
      t.tollgate.checker({
        method: "GET",
        path: "/api/search",
        authorization: undefined,
        apiKey: key,
        ip: "192.0.2.202",
      });
    const newKey = async (userId: string) => {
      const made = await admin<{ id: string; key: string }>("POST", "/admin/api-keys", {
        name: "follows its user",
        tier: "pro",
        user_id: userId,
      });
      expect(made.status, JSON.stringify(made.body)).toBe(201);
      return made.body;
    };

    it("changes a password through the admin API, ending every session at once", async () => {
      const user = await t.newUser();
      const a = await t.loginOk(user.username, user.password);
      const b = await t.loginOk(user.username, user.password);
      const changed = await admin("PUT", `/admin/users/${user.id}/password`, {
        password: "a brand new password",
      });
      expect(changed.status).toBe(200);
      expect(changed.body).toMatchObject({ user_id: user.id, revoked: 2 });
      for (const token of [a.access_token, b.access_token]) {
        expect((await me(token)).status).toBe(401);
        expect(await t.check(token)).toMatchObject({ kind: "deny", status: 401 });
      }
      expect((await t.login(user.username, user.password)).status).toBe(401);
      expect((await t.login(user.username, "a brand new password")).status).toBe(200);
      expect((await admin("PUT", `/admin/users/${user.id}/password`, { password: "short" })).status).toBe(
        400,
      );
      expect((await admin("PUT", `/admin/users/${user.id}/password`, {})).status).toBe(400);
      expect(
        (await admin("PUT", "/admin/users/usr_0000000000000000/password", { password: "long enough" }))
          .status,
      ).toBe(404);
    });

    it("deletes a user: tokens and logins get 401, lookups 404, and the name can be taken again", async () => {
      const user = await t.newUser();
      const login = await t.loginOk(user.username, user.password);
      const deleted = await admin("DELETE", `/admin/users/${user.id}`);
      expect(deleted.status).toBe(200);
      expect(deleted.body).toMatchObject({ user_id: user.id, revoked: 1 });
      expect((await me(login.access_token)).status).toBe(401);
      expect(await t.check(login.access_token)).toMatchObject({ kind: "deny", status: 401 });
      const refused = await t.login(user.username, user.password);
      expect(refused.status).toBe(401);
      expect(refused.body).toEqual({ error: "unauthorized", message: "Invalid username or password" });
      expect((await admin("GET", `/admin/users/${user.id}/sessions`)).status).toBe(404);
      expect((await admin("GET", `/admin/users?username=${user.username}`)).status).toBe(404);
      expect((await admin("DELETE", `/admin/users/${user.id}`)).status).toBe(404);
      // Changes to a deleted user never bring it back.
      expect((await admin("PUT", `/admin/users/${user.id}/tier`, { tier: "pro" })).status).toBe(404);
      expect(await t.store.users.update(user.id, { tier: "pro" })).toBe(false);
      expect(await t.store.users.get(user.id)).toBeUndefined();
      const again = await admin<{ user_id: string }>("POST", "/admin/users", {
        username: user.username,
        password: "another long password",
        tier: "pro",
      });
      expect(again.status).toBe(201);
      expect(again.body.user_id).not.toBe(user.id);
      expect((await me(login.access_token)).status).toBe(401);
    });

    it("leaves no session of a login that lands while its user is deleted, not even for a user given its id again", async () => {
      const id = uniqueName("fixed");
      const username = uniqueName("doomed");
      const password = "the first password";
      const passwordHash = await hashPassword(password);
      expect(
        await t.store.users.create({ id, username, tier: "free", passwordHash, source: "file" }),
      ).not.toBe("exists");
      const target = fileTarget(t.store);
      let token = "";
      // A login lands after the deletion revoked the user's sessions and before the user goes.
      const slowLockout = {
        async clear(name: string) {
          token = (await t.loginOk(username, password)).access_token;
          await target.lockout.clear(name);
        },
      };
      await removeUsers({ ...target, lockout: slowLockout }, [{ id, username }]);
      expect(token).not.toBe("");
      expect(await t.store.sessions.list(id)).toEqual([]);
      expect((await me(token)).status).toBe(401);
      // USERS_FILE ids are fixed: a user created under the same id starts without the old one's sessions.
      expect(
        await t.store.users.create({ id, username: uniqueName("heir"), tier: "free", passwordHash }),
      ).not.toBe("exists");
      await t.store.users.update(id, { tier: "pro" });
      expect(await t.store.sessions.list(id)).toEqual([]);
      expect((await me(token)).status).toBe(401);
      expect(await t.check(token)).toMatchObject({ kind: "deny", status: 401 });
    });

    it("looks a user up by username and lists every user page by page with a cursor", async () => {
      const created = [
        await t.newUser(),
        await t.newUser("pro"),
        await t.newUser(),
        await t.newUser(),
        await t.newUser(),
      ];
      const found = await admin<UserBody>(
        "GET",
        `/admin/users?username=${encodeURIComponent(created[1]?.username ?? "")}`,
      );
      expect(found.status).toBe(200);
      expect(found.body).toMatchObject({
        user_id: created[1]?.id,
        tier: "pro",
        disabled: false,
        source: "admin",
      });
      expect(JSON.stringify(found.body)).not.toMatch(/scrypt|pw|hash/i);

      const seen: string[] = [];
      let cursor: string | null = null;
      let pages = 0;
      do {
        const query: string = cursor === null ? "?limit=2" : `?limit=2&cursor=${cursor}`;
        const page = await admin<PageBody>("GET", `/admin/users${query}`);
        expect(page.status).toBe(200);
        expect(page.body.users.length).toBeLessThanOrEqual(2);
        seen.push(...page.body.users.map((u) => u.user_id));
        cursor = page.body.next_cursor;
        pages += 1;
      } while (cursor !== null && pages < 100);
      expect(new Set(seen).size).toBe(seen.length);
      for (const user of created) expect(seen).toContain(user.id);
      expect(seen).toContain("demo-alice");
      expect((await admin("GET", "/admin/users?cursor={u:x}")).status).toBe(400);
      expect((await admin("GET", "/admin/users?limit=0")).status).toBe(400);
      expect((await admin("GET", "/admin/users?username=nobody_by_that_name")).status).toBe(404);
    });

    it("shows one user by id to an admin: its fields as the username lookup gives them, 404 JSON for none", async () => {
      const user = await t.newUser("pro");
      const shown = await admin<UserBody & { created_at: string }>("GET", `/admin/users/${user.id}`);
      expect(shown.status).toBe(200);
      const byName = await admin<UserBody>(
        "GET",
        `/admin/users?username=${encodeURIComponent(user.username)}`,
      );
      expect(shown.body).toEqual(byName.body);
      expect(shown.body).toMatchObject({
        user_id: user.id,
        username: user.username,
        tier: "pro",
        disabled: false,
      });
      expect(Number.isNaN(Date.parse(shown.body.created_at))).toBe(false);
      expect(JSON.stringify(shown.body)).not.toMatch(/scrypt|pw|hash/i);
      // A change shows on the next read.
      await admin("PUT", `/admin/users/${user.id}/disabled`, { disabled: true });
      expect((await admin<UserBody>("GET", `/admin/users/${user.id}`)).body.disabled).toBe(true);
      for (const id of ["usr_0000000000000000", "{u:x}", "%00"]) {
        const missing = await admin("GET", `/admin/users/${encodeURIComponent(id)}`);
        expect(missing.status, id).toBe(404);
        expect(missing.body, id).toEqual({ error: "not_found", message: "No such user" });
      }
      const anonymous = await t.admin("GET", `/admin/users/${user.id}`);
      expect(anonymous.status).toBe(401);
      expect(JSON.stringify(anonymous.body)).not.toContain(user.username);
    });

    it("creates no session for a user disabled, deleted or given a new password after the login checked", async () => {
      const user = await t.newUser();
      const stored = await t.store.users.get(user.id);
      const input = {
        userId: user.id,
        deviceName: "",
        ip: "203.0.113.9",
        userAgent: "",
        passwordHash: stored?.passwordHash ?? "",
      };
      expect(await t.store.sessions.create(input, LIFETIMES)).not.toBe("refused");
      await t.store.users.update(user.id, { passwordHash: await hashPassword("another password") });
      expect(await t.store.sessions.create(input, LIFETIMES)).toBe("refused");
      const fresh = { ...input, passwordHash: (await t.store.users.get(user.id))?.passwordHash ?? "" };
      await t.store.users.update(user.id, { disabled: true });
      expect(await t.store.sessions.create(fresh, LIFETIMES)).toBe("refused");
      await t.store.users.update(user.id, { disabled: false });
      expect(await t.store.sessions.create(fresh, LIFETIMES)).not.toBe("refused");
      await t.store.users.remove(user.id);
      expect(await t.store.sessions.create(fresh, LIFETIMES)).toBe("refused");
    });

    it("never lets a login that races a disable yield a token that works after re-enabling", async () => {
      const user = await t.newUser();
      for (let round = 0; round < 8; round += 1) {
        const delay = round * 4;
        const [login] = await Promise.all([
          t.login(user.username, user.password),
          new Promise((resolve) => setTimeout(resolve, delay)).then(() =>
            admin("PUT", `/admin/users/${user.id}/disabled`, { disabled: true }),
          ),
        ]);
        expect((await admin("PUT", `/admin/users/${user.id}/disabled`, { disabled: false })).status).toBe(
          200,
        );
        if (login.status === 200) {
          const token = (login.body as LoginBody).access_token;
          expect((await me(token)).status, `round ${round}`).toBe(401);
          expect(await t.check(token), `round ${round}`).toMatchObject({ kind: "deny", status: 401 });
        }
      }
    });

    it("ends every session in the step that sets a new password, whatever fails after it", async () => {
      const user = await t.newUser();
      const { access_token: token } = await t.loginOk(user.username, user.password);
      const stored = (await t.store.users.get(user.id))?.passwordHash ?? "";
      // A login that verified the old password, landing after a change counted the sessions.
      const late = await t.store.sessions.create(
        { userId: user.id, deviceName: "late", ip: "203.0.113.9", userAgent: "", passwordHash: stored },
        LIFETIMES,
      );
      expect(late).not.toBe("refused");
      // The step that sets the password, with nothing after it (a store that failed there: 503).
      expect(
        await t.store.users.update(user.id, { passwordHash: await hashPassword("a new password") }),
      ).toBe(true);
      expect(await t.store.sessions.list(user.id)).toEqual([]);
      expect((await me(token)).status).toBe(401);
      expect(await t.check(token)).toMatchObject({ kind: "deny", status: 401 });
      // The admin API still counts the sessions it ends.
      const { access_token: next } = await t.loginOk(user.username, "a new password");
      const changed = await admin("PUT", `/admin/users/${user.id}/password`, {
        password: "a third password",
      });
      expect(changed.body).toMatchObject({ user_id: user.id, revoked: 1 });
      expect((await me(next)).status).toBe(401);
    });

    it("ends on re-enabling the sessions a disable that failed half-way left, so no old token serves again", async () => {
      const user = await t.newUser();
      const { access_token: token } = await t.loginOk(user.username, user.password);
      // PUT …/disabled set the flag, then the store failed before the sessions were revoked (503).
      expect(await t.store.users.update(user.id, { disabled: true })).toBe(true);
      expect((await me(token)).status).toBe(401);
      const enabled = await admin("PUT", `/admin/users/${user.id}/disabled`, { disabled: false });
      expect(enabled.status).toBe(200);
      expect(enabled.body).toMatchObject({ disabled: false, revoked: 1 });
      expect((await me(token)).status).toBe(401);
      expect(await t.check(token)).toMatchObject({ kind: "deny", status: 401 });
      expect((await t.login(user.username, user.password)).status).toBe(200);
    });

    it("keeps admin changes to demo users across a restart", async () => {
      const alice = await admin<UserBody>("GET", "/admin/users?username=alice");
      const id = alice.body.user_id;
      expect((await admin("PUT", `/admin/users/${id}/tier`, { tier: "enterprise" })).status).toBe(200);
      expect(await loadUsers(t.store.users, demoUsers())).toEqual([]);
      expect((await t.store.users.get(id))?.tier).toBe("enterprise");
      expect((await admin("PUT", `/admin/users/${id}/tier`, { tier: "free" })).status).toBe(200);
    });

    it("applies USERS_FILE at restarts: what the file changes wins, what it did not change keeps the admin's value", async () => {
      const username = uniqueName("file");
      const entry = { username, tier: "free", password: "file password one" };
      await restartWith([entry]);
      const user = (await t.store.users.findByUsername(username)) as { id: string };
      const login = await t.loginOk(username, "file password one");

      // An admin tier change survives a restart with the same file.
      expect((await admin("PUT", `/admin/users/${user.id}/tier`, { tier: "pro" })).status).toBe(200);
      await restartWith([entry]);
      expect((await t.store.users.get(user.id))?.tier).toBe("pro");
      expect((await me(login.access_token)).status).toBe(200);

      // A tier the file changes is applied.
      await restartWith([{ ...entry, tier: "enterprise" }]);
      expect((await t.store.users.get(user.id))?.tier).toBe("enterprise");

      // A password the file changes ends every session; the old password no longer logs in.
      const changed = { ...entry, tier: "enterprise", password: "file password two" };
      await restartWith([changed]);
      expect((await me(login.access_token)).status).toBe(401);
      expect((await t.login(username, "file password one")).status).toBe(401);
      const second = await t.loginOk(username, "file password two");
      // The same file again changes nothing: the session stays.
      await restartWith([changed]);
      expect((await me(second.access_token)).status).toBe(200);

      // A user removed from the file can no longer log in, and its tokens stop working.
      await restartWith([]);
      expect((await me(second.access_token)).status).toBe(401);
      expect((await t.login(username, "file password two")).status).toBe(401);
      expect(await t.store.users.get(user.id)).toBeUndefined();
    });

    it("frees a locked username when USERS_FILE changes its password at a restart, and only then", async () => {
      const username = uniqueName("Locked");
      const entry = { username, tier: "free", password: "file password one" };
      await restartWith([entry]);
      await lockOut(username);
      expect(await loginStatus(username, "file password one")).toBe(429);
      // The same file again changes nothing: the name stays locked.
      await restartWith([entry]);
      expect(await loginStatus(username, "file password one")).toBe(429);
      // A new password: guesses at the old one say nothing about it.
      await restartWith([{ ...entry, password: "file password two" }]);
      expect(await loginStatus(username, "file password two")).toBe(200);
    });

    it("frees a locked username when USERS_FILE creates its user or removes it, as the admin API does", async () => {
      const username = uniqueName("Guessed");
      // Guesses at a name before it had a user must not lock the new user out.
      await lockOut(username);
      expect(await loginStatus(username, "anything")).toBe(429);
      await restartWith([{ username, tier: "free", password: "a file password" }]);
      expect(await loginStatus(username, "a file password")).toBe(200);
      // A name's failures never outlive the user they were for.
      await lockOut(username);
      expect(await lockout().attempt(username)).toBeGreaterThan(0);
      await restartWith([]);
      expect(await lockout().attempt(username)).toBe(0);
    });

    it("forgets the windows of a user USERS_FILE no longer lists, as the admin API's delete does", async () => {
      const id = uniqueName("file-id");
      const entry = { id, username: uniqueName("counted"), tier: "free", password: "a file password" };
      await restartWith([entry]);
      for (let i = 0; i < 3; i += 1) await spend(t.store, id);
      expect(await used(t.store, id)).toEqual([3]);
      await restartWith([]);
      expect(await t.store.users.get(id)).toBeUndefined();
      // The file may list the id again: its new user starts with the whole window.
      expect(await used(t.store, id)).toEqual([0]);
    });

    it("does not bring back through USERS_FILE a user deleted through the admin API", async () => {
      const username = uniqueName("deleted");
      const entry = { username, tier: "free", password: "a file password" };
      await restartWith([entry]);
      const user = (await t.store.users.findByUsername(username)) as { id: string };
      expect((await admin("DELETE", `/admin/users/${user.id}`)).status).toBe(200);
      await restartWith([entry]);
      expect(await t.store.users.findByUsername(username)).toBeUndefined();
      expect((await t.login(username, "a file password")).status).toBe(401);
      // Recreated through the admin API, the name is the file's again at the next restart.
      expect(
        (await admin("POST", "/admin/users", { username, password: "an admin password", tier: "pro" }))
          .status,
      ).toBe(201);
      await restartWith([entry]);
      expect((await t.login(username, "a file password")).status).toBe(200);
    });

    it("creates again a user USERS_FILE dropped once the file lists it again, an admin's deletion aside", async () => {
      const username = uniqueName("dropped");
      const entry = { username, tier: "free", password: "a file password" };
      await restartWith([entry]);
      expect((await t.login(username, "a file password")).status).toBe(200);
      await restartWith([]);
      expect(await t.store.users.findByUsername(username)).toBeUndefined();
      expect(await t.store.users.wasRemoved(username)).toBe(false);
      await restartWith([entry]);
      expect((await t.login(username, "a file password")).status).toBe(200);
      expect(await t.store.users.wasRemoved(username)).toBe(false);
    });

    it("revokes the API keys of a user USERS_FILE no longer lists, and no one else's", async () => {
      const username = uniqueName("keyed");
      await restartWith([{ username, tier: "free", password: "a file password" }]);
      const user = (await t.store.users.findByUsername(username)) as { id: string };
      const key = await newKey(user.id);
      const other = await newKey((await t.newUser()).id);
      expect(await keyCheck(key.key)).toMatchObject({ kind: "allow", identity: { userId: user.id } });
      await restartWith([]);
      expect(await t.store.users.get(user.id)).toBeUndefined();
      expect(await keyCheck(key.key)).toMatchObject({ kind: "deny", status: 401 });
      expect((await admin("GET", `/admin/api-keys/${key.id}`)).status).toBe(404);
      expect(await keyCheck(other.key)).toMatchObject({ kind: "allow" });
    });

    it("deletes the demo users in production with their API keys, windows and lockouts, and no one else's", async () => {
      const store = await makeStore();
      try {
        await loadUsers(store.users, demoUsers());
        const keyFor = async (userId: string | undefined) => {
          const { id, hash } = newApiKey();
          return store.apiKeys.create({ id, hash, name: "demo's", tier: "enterprise", userId });
        };
        const alices = await keyFor("demo-alice");
        const carols = await keyFor("demo-carol");
        const unbound = await keyFor(undefined);
        const user = await store.users.create({
          username: uniqueName("kept"),
          tier: "free",
          passwordHash: "x",
        });
        if (user === "exists") throw new Error("a fresh name");
        const kept = await keyFor(user.id);
        await spend(store, "demo-alice");
        const target = fileTarget(store);
        for (let i = 0; i < 10; i += 1) await target.lockout.attempt("alice");
        expect(await target.lockout.attempt("alice")).toBeGreaterThan(0);
        expect(await removeDemoUsers(target, silent)).toBe(3);
        // Its windows and its name's lockout go with it, as the admin API's delete takes them.
        expect(await used(store, "demo-alice")).toEqual([0]);
        expect(await target.lockout.attempt("alice")).toBe(0);
        expect(await store.users.get("demo-alice")).toBeUndefined();
        expect(await store.apiKeys.get(alices.id)).toBeUndefined();
        expect(await store.apiKeys.get(carols.id)).toBeUndefined();
        expect(await store.apiKeys.get(unbound.id)).toBeDefined();
        expect(await store.apiKeys.get(kept.id)).toBeDefined();
      } finally {
        await store.close();
      }
    });

    it("revokes at start the API keys an earlier build left to a deleted user, and only those", async () => {
      const store = await makeStore();
      try {
        const fresh = async () => {
          const user = await store.users.create({
            username: uniqueName("orphan"),
            tier: "free",
            passwordHash: "x",
          });
          if (user === "exists") throw new Error("a fresh name");
          return user;
        };
        const keyFor = async (userId: string | undefined) => {
          const { id, hash } = newApiKey();
          return store.apiKeys.create({ id, hash, name: "k", tier: "pro", userId });
        };
        const [gone, kept] = [await fresh(), await fresh()];
        const orphaned = [await keyFor(gone.id), await keyFor(gone.id)];
        const others = [await keyFor(kept.id), await keyFor(undefined)];
        const orphanWindow = { category: "search", rule: SEARCH.rule };
        await store.limiter.hit(`k:${orphaned[0]?.id}`, [orphanWindow]);
        // What a build before every deletion revoked keys did: the user goes, its keys stay.
        expect(await store.users.remove(gone.id)).toBe(true);
        const target = fileTarget(store);
        const revoked = await revokeOrphanKeys(target);
        expect(revoked.map((k) => k.id).sort()).toEqual(orphaned.map((k) => k.id).sort());
        for (const key of orphaned) expect(await store.apiKeys.get(key.id)).toBeUndefined();
        for (const key of others) expect(await store.apiKeys.get(key.id)).toBeDefined();
        expect((await store.limiter.peek(`k:${orphaned[0]?.id}`, orphanWindow)).map((w) => w.used)).toEqual([
          0,
        ]);
        // A second start finds nothing more.
        expect(await revokeOrphanKeys(target)).toEqual([]);
      } finally {
        await store.close();
      }
    });
  });
}
