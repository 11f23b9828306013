// Start-up users: USERS_FILE (JSON) loaded into the store, or the demo users outside production.
import { readFileSync } from "node:fs";
import { z } from "zod";
import { ProblemsError, problemsOf } from "../config/problems.js";
import { ANONYMOUS_TIER, type Policy } from "../policy/policy.js";
import { ID_PATTERN } from "./jwt.js";
import { isPasswordHash } from "./passwords.js";
import type { NewUser, UserStore } from "./types.js";
import { canonicalUsername, newUsernameSchema } from "./usernames.js";

export const DEMO_USERS = [
  { id: "demo-alice", username: "alice", tier: "free", password: "secret" },
  { id: "demo-bob", username: "bob_pro", tier: "pro", password: "secret" },
  { id: "demo-carol", username: "ent_carol", tier: "enterprise", password: "secret" },
] as const;

const entrySchema = z
  .strictObject({
    id: z.string().regex(ID_PATTERN, "id: use 1 to 64 characters from A-Z a-z 0-9 _ -").optional(),
    username: newUsernameSchema,
    tier: z.string(),
    password: z.string().min(1).max(1024).optional(),
    password_hash: z.string().refine(isPasswordHash, "not a hash from npm run hash-password").optional(),
  })
  .refine(
    (u) => (u.password === undefined) !== (u.password_hash === undefined),
    "give password or password_hash",
  );

const fileSchema = z.union([z.array(entrySchema), z.strictObject({ users: z.array(entrySchema) })]);

export class UsersFileError extends ProblemsError {
  constructor(file: string, problems: string[]) {
    super(`invalid USERS_FILE ${file}`, problems);
  }
}

/** One validated USERS_FILE entry; a plain password is hashed only when it is applied. */
export type UsersFileEntry = {
  id?: string;
  username: string;
  tier: string;
  password?: string;
  passwordHash?: string;
};

/** Reads and validates USERS_FILE. */
export async function readUsersFile(file: string, policy: Policy): Promise<UsersFileEntry[]> {
  let document: unknown;
  try {
    document = JSON.parse(readFileSync(file, "utf8"));
  } catch (error) {
    throw new UsersFileError(file, [
      `cannot read it as JSON (${(error as NodeJS.ErrnoException).code ?? "syntax error"})`,
    ]);
  }
  const parsed = fileSchema.safeParse(document);
  if (!parsed.success) {
    throw new UsersFileError(file, problemsOf(parsed.error));
  }
  const entries = Array.isArray(parsed.data) ? parsed.data : parsed.data.users;
  const problems = entries.flatMap((u, i) =>
    policy.tiers.has(u.tier) && u.tier !== ANONYMOUS_TIER
      ? []
      : [`users[${i}].tier: "${u.tier}" is not a tier of the policy`],
  );
  // One user per canonical name, as the store keys them: "Alice" and "alice" are one name.
  const names = new Map<string, number>();
  entries.forEach((u, i) => {
    const name = canonicalUsername(u.username);
    const first = names.get(name);
    if (first === undefined) names.set(name, i);
    else if (entries[first]?.username === u.username)
      problems.push(`users[${i}].username: "${u.username}" appears twice`);
    else
      problems.push(
        `users[${i}].username: "${u.username}" is the same name as users[${first}]'s "${entries[first]?.username}" (case and compatibility forms aside)`,
      );
  });
  if (problems.length > 0) throw new UsersFileError(file, problems);
  return entries.map((u) => ({
    ...(u.id === undefined ? {} : { id: u.id }),
    username: u.username,
    tier: u.tier,
    ...(u.password === undefined ? {} : { password: u.password }),
    ...(u.password_hash === undefined ? {} : { passwordHash: u.password_hash }),
  }));
}

export const DEMO_USER_IDS: ReadonlySet<string> = new Set(DEMO_USERS.map((u) => u.id));

/**
 * The hash of the demo password ("secret", printed in the README), made once with npm run
 * hash-password: start-up does no scrypt work for the demo users (three hashes were most of the time
 * from listening to ready). test/unit/users-file.test.ts checks it against DEMO_USERS.
 */
export const DEMO_PASSWORD_HASH =
  "scrypt$16384$8$1$8ZJII6xW6nMzimC4BQZ0sg$rD_-an8M-39XdvU_PJy4ev5WXT5GbPk1OPUQrV0nQHw";

export function demoUsers(): NewUser[] {
  return DEMO_USERS.map((u) => ({
    id: u.id,
    username: u.username,
    tier: u.tier,
    passwordHash: DEMO_PASSWORD_HASH,
    source: "demo" as const,
  }));
}

/**
 * Creates the users that do not exist yet. An existing user is left exactly as the admin API left
 * it, and a user deleted through the admin API is not brought back. Answers the names created.
 */
export async function loadUsers(users: UserStore, entries: readonly NewUser[]): Promise<string[]> {
  const created: string[] = [];
  for (const entry of entries) {
    if ((await users.findByUsername(entry.username)) !== undefined) continue;
    if (await users.wasRemoved(entry.username)) continue;
    if ((await users.create(entry)) !== "exists") created.push(entry.username);
  }
  return created;
}
