// USERS_FILE: the demo users' precomputed password hash, and the names a file may hold.
import { randomBytes } from "node:crypto";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { hashPassword, verifyPassword } from "../../src/auth/passwords.js";
import {
  DEMO_PASSWORD_HASH,
  DEMO_USERS,
  demoUsers,
  readUsersFile,
  UsersFileError,
} from "../../src/auth/users-file.js";
import { loadPolicy } from "../../src/policy/policy.js";

describe("demo users", () => {
  it("carry a hash of their documented password, and of no other", async () => {
    for (const user of DEMO_USERS) expect(await verifyPassword(user.password, DEMO_PASSWORD_HASH)).toBe(true);
    expect(await verifyPassword("Secret", DEMO_PASSWORD_HASH)).toBe(false);
    expect(demoUsers().map((u) => [u.username, u.passwordHash])).toEqual(
      DEMO_USERS.map((u) => [u.username, DEMO_PASSWORD_HASH]),
    );
  });
});

describe("USERS_FILE", () => {
  const dir = mkdtempSync(join(tmpdir(), "tollgate-users-file-"));
  const policy = loadPolicy(undefined);
  const problemsOf = async (users: unknown): Promise<string[]> => {
    const file = join(dir, `${randomBytes(4).toString("hex")}.json`);
    writeFileSync(file, JSON.stringify(users));
    try {
      await readUsersFile(file, policy);
    } catch (error) {
      if (error instanceof UsersFileError) return error.problems;
      throw error;
    }
    return [];
  };
  const user = (username: string) => ({ username, tier: "free", password: "a password" });

  it("refuses two entries whose names are one once case and compatibility forms are set aside", async () => {
    expect(await problemsOf([user("alice"), user("Alice"), user("ＡＬＩＣＥ"), user("alice")])).toEqual([
      `users[1].username: "Alice" is the same name as users[0]'s "alice" (case and compatibility forms aside)`,
      `users[2].username: "ＡＬＩＣＥ" is the same name as users[0]'s "alice" (case and compatibility forms aside)`,
      `users[3].username: "alice" appears twice`,
    ]);
  });

  it("refuses invisible, bidirectional-control and mixed-script names, naming the entry", async () => {
    expect(
      await problemsOf({ users: [user("bob"), user("bob\u200b"), user("\u202ebob"), user("bоb")] }),
    ).toEqual([
      "users[1].username: must not contain invisible format characters (U+200B at character 4)",
      "users[2].username: must not contain bidirectional text controls (U+202E at character 1)",
      'users[3].username: mixes the Latin and Cyrillic scripts ("о", U+043E): use one script, or Latin with Han and Hiragana/Katakana, Bopomofo or Hangul',
    ]);
  });

  it("refuses names whose combining marks hide or overlay letters, naming the entry", async () => {
    const names = ["alice", "ali\u0307ce", `bob${"\u0336".repeat(20)}`, "\u0301\u0302\u0303"];
    expect(await problemsOf({ users: names.map(user) })).toEqual([
      'users[1].username: must not put a combining dot above (U+0307) on "i", whose own dot hides it',
      "users[2].username: must not repeat a combining mark on one letter (U+0336 twice in a row)",
      "users[3].username: must not begin with a combining mark (U+0301): a mark needs a letter under it",
    ]);
  });

  /** A hash of "a password" as hashPassword writes it, with its scrypt parameters as given. */
  const withParameters = async (n: string, r: string, p: string, keyBytes = 32) => {
    const [, , , , salt, key] = (await hashPassword("a password")).split("$");
    const keyText = Buffer.from(key ?? "", "base64url")
      .subarray(0, keyBytes)
      .toString("base64url");
    return `scrypt$${n}$${r}$${p}$${salt}$${keyBytes > 32 ? keyText + keyText : keyText}`;
  };

  it("takes hash-password's hashes and refuses any other scrypt parameters or lengths, naming the entry", async () => {
    const entry = (hash: string) => ({
      username: `u${randomBytes(3).toString("hex")}`,
      tier: "free",
      password_hash: hash,
    });
    expect(await problemsOf([entry(await hashPassword("a password"))])).toEqual([]);
    const others = [
      await withParameters("3", "8", "1"), // scrypt refuses N that is not a power of two: an error per login
      await withParameters("1048576", "8", "1"), // seconds and a gigabyte per guess
      await withParameters("1024", "8", "1"), // less work than an unknown name's: tells the name exists
      await withParameters("16384", "8", "2"),
      await withParameters("16384", "8", "1", 16), // never verifies
    ];
    const problems = await problemsOf(others.map(entry));
    expect(problems).toEqual(
      others.map((_, i) => `[${i}].password_hash: not a hash from npm run hash-password`),
    );
  });

  it("answers a stored hash of other parameters false, with the work of an unknown name and no error", async () => {
    expect(await verifyPassword("a password", await hashPassword("a password"))).toBe(true);
    for (const hash of [await withParameters("3", "8", "1"), await withParameters("1024", "8", "1")]) {
      await expect(verifyPassword("a password", hash)).resolves.toBe(false);
    }
  });
});
