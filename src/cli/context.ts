// What every command's action gets: its options merged with the global ones, the admin client, --json,
// and the user an argument names (an id or a username).
import type { Command } from "commander";
import { type AdminClient, adminClient } from "./admin-client.js";
import { CliError } from "./exit.js";
import { json, print, printable } from "./output.js";

/** The argument that names a user, for commander's .argument(). */
export const USER_ARGUMENT = ["<user>", "a user id or a username (any form of it)"] as const;

export type Context = {
  json: boolean;
  /** The command's own options and the global ones. */
  options: Record<string, unknown>;
  client(): AdminClient;
};

/**
 * A commander action: commander passes the arguments (as their parsers made them), then the
 * options, then the command; the function gets the context and the arguments.
 */
export function action<A extends unknown[]>(fn: (ctx: Context, ...args: A) => Promise<void>) {
  return async (...received: unknown[]): Promise<void> => {
    const command = received[received.length - 1] as Command;
    const options = command.optsWithGlobals();
    const args = received.slice(0, -2) as A;
    const ctx: Context = {
      json: options.json === true,
      options,
      client: () =>
        adminClient({
          url: options.url as string | undefined,
          adminToken: options.adminToken as string | undefined,
        }),
    };
    await fn(ctx, ...args);
  };
}

/**
 * A message for people, or the admin API's answer as it is for --json. Each line of the message is
 * made printable, in case one names a stored text (its own line breaks are the message's).
 */
export function report(ctx: Context, answer: unknown, message: string): void {
  print(ctx.json ? json(answer) : `${message.split("\n").map(printable).join("\n")}\n`);
}

export type UserJson = {
  user_id: string;
  username: string;
  tier: string;
  disabled: boolean;
  source: string;
  created_at: string;
};

/** What a user id may look like (the admin API's ID_PATTERN). */
const ID = /^[A-Za-z0-9_-]{1,64}$/;

/** The user named by `ref`: by id when one has that id, else by username (any form of it). */
export async function findUser(client: AdminClient, ref: string): Promise<UserJson> {
  if (ID.test(ref)) {
    try {
      return await client.call<UserJson>("GET", `/admin/users/${encodeURIComponent(ref)}`);
    } catch (error) {
      if (!(error instanceof CliError) || error.status !== 404) throw error;
    }
  }
  try {
    return await client.call<UserJson>("GET", `/admin/users?username=${encodeURIComponent(ref)}`);
  } catch (error) {
    if (error instanceof CliError && error.status === 404) {
      // An API key or token pasted in the wrong place is not repeated on the terminal or in CI logs.
      const named = ref.startsWith("tg_") || ref.length > 64 ? "given" : `"${ref}"`;
      throw new CliError(error.exitCode, `no user with the id or username ${named}`, { status: 404 });
    }
    throw error;
  }
}
