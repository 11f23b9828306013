// tollgate api-keys create|list|get|revoke|tier and api-keys limits set|reset: keys for machine clients.
// The key itself exists once, in create's answer: only its hash is kept, so no other command can show it.
import type { Command } from "commander";
import { limitsArgument, ownLimitsText } from "./access-commands.js";
import { everyPage } from "./admin-client.js";
import { action, type Context, report } from "./context.js";
import { CliError, EXIT } from "./exit.js";
import { fields, json, print, printable, table } from "./output.js";

type KeyJson = {
  id: string;
  name: string;
  tier: string;
  user_id: string | null;
  blocked: boolean;
  created_at: string;
  last_used_at: string | null;
  own_limits: Record<string, string[]>;
};

const ID_ARGUMENT = ["<id>", "the key's id (api-keys list shows it), never the key itself"] as const;

/** An API key's id as the admin API answers it (the CLI reaches auth/ through the API only). */
const KEY_ID = /^[0-9a-f]{16}$/;
/**
 * A whole key somewhere in the argument: its prefix and id, not a bare `tg_`, which a key's random
 * secret holds once in about 6,000 keys (so a secret pasted alone gets the id's message, as it should).
 */
const PASTED_KEY = /tg_[0-9a-f]{16}_/;

const keyPath = (id: string) => `/admin/api-keys/${encodeURIComponent(id)}`;

/** The key with that id; the admin API's 404 as a message that names it. */
async function findKey(ctx: Context, id: string): Promise<KeyJson> {
  // A key pasted for its id, however it was pasted (with a space before it, a header's name, an
  // `ApiKey ` scheme): refused before any message could echo it (commander's own would).
  if (PASTED_KEY.test(id))
    throw new CliError(EXIT.usage, "give the key's id (api-keys list shows it), not the key itself");
  // Nor is anything else sent that is not an id's shape: a key's secret pasted alone would go into
  // the request's path, where proxies and access logs between here and tollgate keep it.
  if (!KEY_ID.test(id))
    throw new CliError(EXIT.usage, "an API key's id is 16 hex digits (api-keys list shows it)");
  try {
    return await ctx.client().call<KeyJson>("GET", keyPath(id));
  } catch (error) {
    if (error instanceof CliError && error.status === 404)
      throw new CliError(error.exitCode, `no API key with the id "${id}"`, { status: 404 });
    throw error;
  }
}

const keyFields = (key: KeyJson) =>
  fields([
    ["id", key.id],
    ["name", key.name],
    ["tier", key.tier],
    ["user", key.user_id],
    ["blocked", key.blocked ? "yes (its user is disabled)" : "no"],
    ["created", key.created_at],
    ["last used", key.last_used_at ?? "never"],
    ["own limits", ownLimitsText(key.own_limits)],
  ]);

export function apiKeysCommands(program: Command): void {
  const keys = program.command("api-keys").description("API keys for machine clients: create, list, revoke");
  keys
    .command("create")
    .description("create a key and print it this once (only its hash is kept)")
    .requiredOption("--name <name>", "what the key is for (1 to 100 characters, no control characters)")
    .requiredOption("--tier <tier>", "the key's tier (one of the policy's)")
    .option("--user-id <id>", "an existing user the upstream sees as the key's (x-user-id)")
    .action(
      action(async (ctx) => {
        const { name, tier, userId } = ctx.options as { name: string; tier: string; userId?: string };
        const body = { name, tier, ...(userId === undefined ? {} : { user_id: userId }) };
        const created = await ctx.client().call<KeyJson & { key: string }>("POST", "/admin/api-keys", body);
        const user = created.user_id === null ? "" : `, user ${created.user_id}`;
        report(
          ctx,
          created,
          `created API key ${created.id} "${printable(created.name)}", tier ${created.tier}${user}\n` +
            `the key, shown once (store it now; it cannot be shown again): ${created.key}`,
        );
      }),
    );
  keys
    .command("list")
    .description("list keys in id order, never a secret")
    .action(
      action(async (ctx) => {
        // Every page: the listing answers at most 1000 keys at a time.
        const client = ctx.client();
        const { items: all } = await everyPage<KeyJson>(
          async (after) => {
            const page = await client.call<{ api_keys: unknown; next: unknown }>(
              "GET",
              `/admin/api-keys${after === undefined ? "" : `?after=${encodeURIComponent(after)}`}`,
            );
            return { items: page.api_keys, next: page.next };
          },
          undefined,
          true,
        );
        const answer = { api_keys: all, total: all.length };
        const headers = ["id", "name", "tier", "user", "blocked", "created", "last used"];
        const rows = answer.api_keys.map((k) => [
          k.id,
          k.name,
          k.tier,
          k.user_id,
          k.blocked ? "yes (user disabled)" : "no",
          k.created_at,
          k.last_used_at ?? "never",
        ]);
        print(ctx.json ? json(answer) : table(headers, rows));
      }),
    );
  keys
    .command("get")
    .description("show a key: tier, user, last use, own limits (never its secret)")
    .argument(...ID_ARGUMENT)
    .action(
      action(async (ctx, id: string) => {
        const key = await findKey(ctx, id);
        print(ctx.json ? json(key) : keyFields(key));
      }),
    );
  keys
    .command("revoke")
    .description("revoke a key: every check with it on every instance is refused from the answer on")
    .argument(...ID_ARGUMENT)
    .action(
      action(async (ctx, id: string) => {
        const key = await findKey(ctx, id);
        const answer = await ctx.client().call("DELETE", keyPath(key.id));
        report(ctx, answer, `revoked API key ${key.id} "${printable(key.name)}": refused from now on`);
      }),
    );
  keys
    .command("tier")
    .description("change a key's tier (effective on the next request)")
    .argument(...ID_ARGUMENT)
    .argument("<tier>", "the new tier")
    .action(
      action(async (ctx, id: string, tier: string) => {
        const key = await findKey(ctx, id);
        const answer = await ctx.client().call("PUT", `${keyPath(key.id)}/tier`, { tier });
        report(ctx, answer, `API key ${key.id} "${printable(key.name)}": tier ${key.tier} -> ${tier}`);
      }),
    );

  const limits = keys.command("limits").description("a key's own rate limits (api-keys get shows them)");
  limits
    .command("set")
    .description("give a key its own limits for some categories (the others follow its tier)")
    .argument(...ID_ARGUMENT)
    .addArgument(limitsArgument())
    .action(
      action(async (ctx, id: string, body: Record<string, string[] | null>) => {
        const key = await findKey(ctx, id);
        const answer = await ctx.client().call<KeyJson>("PUT", `${keyPath(key.id)}/limits`, body);
        report(ctx, answer, `API key ${key.id}: own limits ${ownLimitsText(answer.own_limits)}`);
      }),
    );
  limits
    .command("reset")
    .description("a fresh start on the tier: the key's own limits and every window counted so far go")
    .argument(...ID_ARGUMENT)
    .action(
      action(async (ctx, id: string) => {
        const key = await findKey(ctx, id);
        const answer = await ctx.client().call("DELETE", `${keyPath(key.id)}/limits`);
        report(ctx, answer, `API key ${key.id}: own limits and windows cleared`);
      }),
    );
}
