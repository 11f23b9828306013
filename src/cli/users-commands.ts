// tollgate users create|get|list|tier|password|disable|enable|delete, and lockout clear.
import { createInterface } from "node:readline/promises";
import { type Command, InvalidArgumentError } from "commander";
import { parseWholeNumber, wholeNumberRange } from "../config/numbers.js";
import { everyPage } from "./admin-client.js";
import { action, type Context, findUser, report, USER_ARGUMENT, type UserJson } from "./context.js";
import { CliError, EXIT } from "./exit.js";
import { fields, json, print, table } from "./output.js";
import { readPassword } from "./password.js";

const PASSWORD_STDIN = [
  "--password-stdin",
  "read the password from standard input (else asked on the terminal)",
] as const;

type Page = { users: unknown; next_cursor: unknown };

const userRows = (users: readonly UserJson[]) =>
  table(
    ["user_id", "username", "tier", "disabled", "source", "created_at"],
    users.map((u) => [u.user_id, u.username, u.tier, u.disabled, u.source, u.created_at]),
  );

/** The admin API's ?limit=, read as it reads it: "0x10", "1e2" or " 5" fail here, not a page later. */
function pageSize(value: string): number {
  const n = parseWholeNumber(value, 1, 500);
  if (n === undefined) throw new InvalidArgumentError(wholeNumberRange(1, 500));
  return n;
}

async function list(ctx: Context): Promise<void> {
  const client = ctx.client();
  const { limit, cursor, all } = ctx.options as { limit: number; cursor?: string; all?: boolean };
  const { items: users, next } = await everyPage<UserJson>(
    async (after) => {
      const query = new URLSearchParams({
        limit: String(all ? 500 : limit),
        ...(after ? { cursor: after } : {}),
      });
      const page = await client.call<Page>("GET", `/admin/users?${query}`);
      return { items: page.users, next: page.next_cursor };
    },
    cursor,
    all === true,
  );
  if (ctx.json) return print(json({ users, next_cursor: next ?? null }));
  print(userRows(users));
  if (next) process.stderr.write(`more users: tollgate users list --cursor ${next}\n`);
}

/** Deleting asks first on a terminal; a script says --yes. */
async function confirmDelete(user: UserJson, yes: boolean): Promise<void> {
  if (yes) return;
  if (!process.stdin.isTTY)
    throw new CliError(EXIT.usage, "deleting a user needs --yes when not on a terminal");
  const rl = createInterface({ input: process.stdin, output: process.stderr });
  const answer = await rl.question(`delete ${user.username} (${user.user_id}) and every session? [y/N] `);
  rl.close();
  if (!/^y(es)?$/i.test(answer.trim())) throw new CliError(EXIT.failed, "nothing deleted");
}

export function usersCommands(program: Command): void {
  const users = program.command("users").description("create, inspect and change users");
  users
    .command("create")
    .description("create a user; the password is asked for, or read with --password-stdin")
    .argument("<username>", "the new username (kept as typed)")
    .requiredOption("--tier <tier>", "the user's tier (one of the policy's)")
    .option(...PASSWORD_STDIN)
    .action(
      action(async (ctx, username: string) => {
        const client = ctx.client();
        const password = await readPassword({ stdin: ctx.options.passwordStdin === true });
        const tier = ctx.options.tier as string;
        const created = await client.call<UserJson>("POST", "/admin/users", { username, password, tier });
        report(ctx, created, `created ${created.username} (${created.user_id}), tier ${created.tier}`);
      }),
    );
  users
    .command("get")
    .description("show a user")
    .argument(...USER_ARGUMENT)
    .action(
      action(async (ctx, ref: string) => {
        const user = await findUser(ctx.client(), ref);
        print(ctx.json ? json(user) : fields(Object.entries(user)));
      }),
    );
  users
    .command("list")
    .description("list users in id order, a page at a time")
    .option("--limit <n>", "users per page (1 to 500)", pageSize, 100)
    .option("--cursor <cursor>", "the page after this cursor (printed under the previous page)")
    .option("--all", "every page")
    .action(action(list));
  users
    .command("tier")
    .description("change a user's tier (effective on the next request)")
    .argument(...USER_ARGUMENT)
    .argument("<tier>", "the new tier")
    .action(
      action(async (ctx, ref: string, tier: string) => {
        const client = ctx.client();
        const user = await findUser(client, ref);
        const path = `/admin/users/${encodeURIComponent(user.user_id)}/tier`;
        const answer = await client.call("PUT", path, { tier });
        report(ctx, answer, `${user.username}: tier ${user.tier} -> ${tier}`);
      }),
    );
  users
    .command("password")
    .description("set a new password; revokes every session and clears the lockout")
    .argument(...USER_ARGUMENT)
    .option(...PASSWORD_STDIN)
    .action(
      action(async (ctx, ref: string) => {
        const client = ctx.client();
        const user = await findUser(client, ref);
        const password = await readPassword({ stdin: ctx.options.passwordStdin === true });
        const path = `/admin/users/${encodeURIComponent(user.user_id)}/password`;
        const answer = await client.call<{ revoked: number }>("PUT", path, { password });
        report(ctx, answer, `${user.username}: password changed, ${answer.revoked} session(s) revoked`);
      }),
    );
  for (const [name, disabled] of [
    ["disable", true],
    ["enable", false],
  ] as const) {
    users
      .command(name)
      .description(disabled ? "disable a user and revoke every session" : "enable a disabled user")
      .argument(...USER_ARGUMENT)
      .action(
        action(async (ctx, ref: string) => {
          const client = ctx.client();
          const user = await findUser(client, ref);
          const path = `/admin/users/${encodeURIComponent(user.user_id)}/disabled`;
          const answer = await client.call<{ revoked: number }>("PUT", path, { disabled });
          const revoked = disabled ? `, ${answer.revoked} session(s) revoked` : "";
          report(ctx, answer, `${user.username}: ${disabled ? "disabled" : "enabled"}${revoked}`);
        }),
      );
  }
  users
    .command("delete")
    .description("delete a user, its sessions, windows and lockout")
    .argument(...USER_ARGUMENT)
    .option("-y, --yes", "do not ask")
    .action(
      action(async (ctx, ref: string) => {
        const client = ctx.client();
        const user = await findUser(client, ref);
        await confirmDelete(user, ctx.options.yes === true);
        const answer = await client.call<{ revoked: number }>(
          "DELETE",
          `/admin/users/${encodeURIComponent(user.user_id)}`,
        );
        report(
          ctx,
          answer,
          `deleted ${user.username} (${user.user_id}), ${answer.revoked} session(s) revoked`,
        );
      }),
    );

  const lockout = program.command("lockout").description("a username's failed-login lockout");
  lockout
    .command("clear")
    .description("forget a user's failed logins, so that it may log in at once")
    .argument(...USER_ARGUMENT)
    .action(
      action(async (ctx, ref: string) => {
        const client = ctx.client();
        const user = await findUser(client, ref);
        await client.call("DELETE", `/admin/users/${encodeURIComponent(user.user_id)}/lockout`);
        report(ctx, { user_id: user.user_id, cleared: true }, `${user.username}: lockout cleared`);
      }),
    );
}
