// The demo users' precomputed password hash: it must be a hash of the password the README prints.
import { describe, expect, it } from "vitest";
import { verifyPassword } from "../../src/auth/passwords.js";
import { DEMO_PASSWORD_HASH, DEMO_USERS, demoUsers } from "../../src/auth/users-file.js";

describe("demo users", () => {
  it("carry a hash of their documented password, and of no other", async () => {
    for (const user of DEMO_USERS) expect(await verifyPassword(user.password, DEMO_PASSWORD_HASH)).toBe(true);
    expect(await verifyPassword("Secret", DEMO_PASSWORD_HASH)).toBe(false);
    expect(demoUsers().map((u) => [u.username, u.passwordHash])).toEqual(
      DEMO_USERS.map((u) => [u.username, DEMO_PASSWORD_HASH]),
    );
  });
});
