// The username part of the identity contract: one user per canonical name, found by any form of it,
// one lockout for all forms, and names that hide or mix scripts refused. Memory and Redis alike.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { UsersFileEntry } from "../../src/auth/users-file.js";
import { syncUsersFile } from "../../src/auth/users-sync.js";
import { createLogger } from "../../src/process/logger.js";
import type { Store } from "../../src/store/store.js";
import type { ErrorBody, LoginBody, MeBody } from "../support/http-client.mjs";
import { fileTarget, type InProcess, startInProcess, uniqueName } from "../support/in-process.js";
import { ADMIN_TOKEN } from "../support/secrets.mjs";

type Created = { user_id: string; username: string; tier: string };
type UserBody = { user_id: string; username: string };

const PASSWORD = "a long password";
const silent = createLogger("silent");
/** Fullwidth forms of ASCII letters, digits and "_": what NFKC maps back to the plain ones. */
const fullwidth = (text: string): string =>
  text.replace(/[!-~]/g, (c) => String.fromCodePoint(c.charCodeAt(0) + 0xfee0));
/** A unique name whose suffix is digits, of no script: "алиса_12345678". */
const numbered = (stem: string): string => `${stem}_${Math.floor(Math.random() * 1e8)}`;
/** A unique name that starts with a capital: "Name_1a2b3c4d". */
const capitalised = (stem: string): string => {
  const name = uniqueName(stem);
  return name.charAt(0).toUpperCase() + name.slice(1);
};

export function describeUsernameContract(name: string, makeStore: () => Store | Promise<Store>): void {
  describe(`username contract: ${name}`, () => {
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
    const create = (username: string, tier = "free") =>
      admin<Created>("POST", "/admin/users", { username, password: PASSWORD, tier });

    it("answers 409 for every form of a taken name: case, width and compatibility forms", async () => {
      const username = capitalised("alice");
      const created = await create(username);
      expect(created.status).toBe(201);
      // The name is kept as it was typed; only its uniqueness and lookups use the canonical form.
      expect(created.body.username).toBe(username);
      for (const form of [username.toLowerCase(), username.toUpperCase(), fullwidth(username)]) {
        const again = await create(form, "pro");
        expect(again.status, form).toBe(409);
        expect(again.body).toMatchObject({ error: "conflict" });
      }
      const ligature = uniqueName("ﬁona");
      expect((await create(ligature)).status).toBe(201);
      expect((await create(ligature.replace("ﬁ", "FI"))).status).toBe(409);
      const sharp = uniqueName("straße");
      expect((await create(sharp)).status).toBe(201);
      expect((await create(sharp.replace("ß", "SS").toUpperCase())).status).toBe(409);
    });

    it("logs in and looks up a user by any form of the name, showing the name as it was created", async () => {
      const username = capitalised("bob");
      const created = await create(username);
      expect(created.status).toBe(201);
      for (const form of [username, username.toLowerCase(), username.toUpperCase(), fullwidth(username)]) {
        const login = await t.login(form, PASSWORD);
        expect(login.status, form).toBe(200);
        expect((login.body as LoginBody).user_id).toBe(created.body.user_id);
        const found = await admin<UserBody>("GET", `/admin/users?username=${encodeURIComponent(form)}`);
        expect(found.body, form).toMatchObject({ user_id: created.body.user_id, username });
      }
      const { access_token } = await t.loginOk(username.toUpperCase(), PASSWORD);
      expect((await t.api<MeBody>("GET", "/me", { token: access_token })).body.username).toBe(username);
      // The same word in another script is another name, and not a user.
      expect((await t.login(username.replace(/o/g, "о"), PASSWORD)).status).toBe(401);
    });

    it("counts failed logins of every form of a name against one lockout", async () => {
      const username = capitalised("carol");
      expect((await create(username)).status).toBe(201);
      const forms = [username, username.toLowerCase(), username.toUpperCase(), fullwidth(username)];
      for (let i = 0; i < 10; i += 1) {
        const failed = await t.login(forms[i % forms.length] as string, `wrong-${i}`, {
          ip: `203.0.113.${i + 1}`,
        });
        expect(failed.status, `attempt ${i + 1}`).toBe(401);
      }
      const locked = await t.login(username.toLowerCase(), PASSWORD, { ip: "192.0.2.210" });
      expect(locked.status).toBe(429);
      expect(locked.body).toMatchObject({ error: "rate_limit_exceeded" });
    });

    it("evaluates at most LOGIN_LOCKOUT's count of a burst of concurrent guesses under different spellings of one name", async () => {
      const username = capitalised("erin");
      expect((await create(username)).status).toBe(201);
      // Forty spellings of one canonical name: the four letters of "erin" in each mix of cases, and a
      // third of the characters fullwidth, at one of three offsets.
      const spellings = Array.from({ length: 40 }, (_, i) =>
        [...username]
          .map((c, at) => {
            const cased = (i >> (at % 4)) & 1 ? c.toUpperCase() : c.toLowerCase();
            return ((i >> 4) + at) % 3 === 0 ? fullwidth(cased) : cased;
          })
          .join(""),
      );
      expect(new Set(spellings).size).toBe(40);
      const replies = await Promise.all(
        spellings.map((form, i) => t.login(form, `wrong-${i}`, { ip: `203.0.113.${i + 1}` })),
      );
      const codes = replies.map((r) => r.status);
      expect(codes.filter((c) => c === 401)).toHaveLength(10);
      expect(codes.filter((c) => c === 429)).toHaveLength(30);
      expect((await t.login(username, PASSWORD, { ip: "192.0.2.211" })).status).toBe(429);
    });

    it.each([
      [
        "a zero-width space",
        "dave\u200b",
        /^username: must not contain invisible format characters \(U\+200B/,
      ],
      [
        "a right-to-left override",
        "\u202eevad",
        /^username: must not contain bidirectional text controls \(U\+202E/,
      ],
      ["a soft hyphen", "da\u00adve", /^username: must not contain invisible format characters \(U\+00AD/],
      [
        "a line separator",
        "dave\u2028",
        /^username: must not contain line or paragraph separators \(U\+2028/,
      ],
      ["a Hangul filler", "da\u3164ve", /^username: must not contain invisible characters \(U\+3164/],
      ["a control character", "da\u0007ve", /^username: must not contain control characters \(U\+0007/],
      [
        "a Cyrillic letter among Latin ones",
        "dаve",
        /^username: mixes the Latin and Cyrillic scripts \("а", U\+0430\)/,
      ],
      ["Hangul with Hiragana", "김やまだ", /^username: mixes the Hangul and Hiragana scripts/],
      [
        "a combining dot above that the i's own dot hides",
        "ali\u0307ce",
        /^username: must not put a combining dot above \(U\+0307\) on "i"/,
      ],
      [
        "a combining overlay repeated",
        `bob${"\u0336".repeat(20)}`,
        /^username: must not repeat a combining mark on one letter \(U\+0336 twice in a row\)/,
      ],
      [
        "only combining marks",
        "\u0301\u0302\u0303",
        /^username: must not begin with a combining mark \(U\+0301\)/,
      ],
    ])("refuses a name with %s with 400 naming the problem", async (_what, stem, message) => {
      const reply = await admin("POST", "/admin/users", {
        username: numbered(stem),
        password: PASSWORD,
        tier: "free",
      });
      expect(reply.status).toBe(400);
      expect(reply.body.error).toBe("bad_request");
      expect(reply.body.message).toMatch(message);
    });

    it("accepts one script with digits and punctuation, and Latin with Japanese, Chinese or Korean", async () => {
      for (const stem of ["алиса", "Οδυσσέας", "山田_taro", "やまだ.taro", "ㄅ山-kim", "김철수_kim"]) {
        const reply = await create(numbered(stem));
        expect(reply.status, stem).toBe(201);
      }
    });

    describe("USERS_FILE", () => {
      const restartWith = (entries: UsersFileEntry[]) => syncUsersFile(fileTarget(t.store), entries, silent);

      it("keeps one user when a restart's file spells the name in another case", async () => {
        const username = capitalised("file");
        await restartWith([{ username, tier: "free", password: "file password one" }]);
        const user = await t.store.users.findByUsername(username);
        expect(user).toBeDefined();
        await restartWith([{ username: username.toUpperCase(), tier: "pro", password: "file password one" }]);
        // The same user, updated, neither removed nor doubled.
        expect(await t.store.users.findByUsername(username.toLowerCase())).toMatchObject({
          id: user?.id,
          tier: "pro",
        });
        expect(await t.store.users.get(user?.id ?? "")).toBeDefined();
        expect((await t.loginOk(username, "file password one")).user_id).toBe(user?.id);
      });

      it("does not bring back, under another spelling, a file user deleted through the admin API", async () => {
        const username = capitalised("gone");
        await restartWith([{ username, tier: "free", password: "file password" }]);
        const user = await t.store.users.findByUsername(username);
        expect((await admin("DELETE", `/admin/users/${user?.id}`)).status).toBe(200);
        await restartWith([{ username: username.toLowerCase(), tier: "free", password: "file password" }]);
        expect(await t.store.users.findByUsername(username)).toBeUndefined();
        expect(await t.store.users.wasRemoved(username.toUpperCase())).toBe(true);
      });
    });
  });
}
