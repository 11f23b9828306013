// tollgate subjects get|block|unblock|tier and subjects limits set|reset: what an admin sets for a
// provider-token subject, which has no tollgate user or session to disable.
import type { Command } from "commander";
import { limitsArgument, ownLimitsText } from "./access-commands.js";
import { action, type Context, report } from "./context.js";
import { CliError, EXIT } from "./exit.js";
import { fields, json, print } from "./output.js";

type SubjectJson = {
  sub: string;
  tier: string | null;
  blocked: boolean;
  own_limits: Record<string, string[]>;
};

const SUB_ARGUMENT = ["<sub>", "the subject as the provider's token names it (its sub claim)"] as const;

/** The admin path of a subject, `rest` after it ("/blocked"). */
function subjectPath(sub: string, rest = ""): string {
  // fetch resolves these as path steps (%2E too), so this command cannot send them; the admin API
  // takes them escaped from a client that sends its path as written.
  if (sub === "." || sub === "..") {
    const path = `/admin/subjects/${sub.replaceAll(".", "%2E")}${rest}`;
    throw new CliError(
      EXIT.usage,
      `URLs resolve the subject "${sub}" as a path step, so this command cannot send it; send ${path} with curl, which keeps the path as written`,
    );
  }
  return `/admin/subjects/${encodeURIComponent(sub)}${rest}`;
}

const subjectFields = (subject: SubjectJson) =>
  fields([
    ["sub", subject.sub],
    ["tier", subject.tier ?? "(the token's)"],
    ["blocked", subject.blocked],
    ["own limits", ownLimitsText(subject.own_limits)],
  ]);

async function setTier(ctx: Context, sub: string, tier: string | undefined): Promise<void> {
  const clear = ctx.options.clear === true;
  if ((tier === undefined) === !clear)
    throw new CliError(EXIT.usage, "give either a tier or --clear (back to the token's tier)");
  const client = ctx.client();
  if (tier === undefined) {
    const answer = await client.call("DELETE", subjectPath(sub, "/tier"));
    report(ctx, answer, `${sub}: the token's tier applies again`);
    return;
  }
  const answer = await client.call("PUT", subjectPath(sub, "/tier"), { tier });
  report(ctx, answer, `${sub}: tier ${tier}, over the token's`);
}

export function subjectsCommands(program: Command): void {
  const subjects = program
    .command("subjects")
    .description("provider-token subjects: block them, give them a tier or limits");
  subjects
    .command("get")
    .description("what is set for a subject: tier, blocked, own limits")
    .argument(...SUB_ARGUMENT)
    .action(
      action(async (ctx, sub: string) => {
        const subject = await ctx.client().call<SubjectJson>("GET", subjectPath(sub));
        print(ctx.json ? json(subject) : subjectFields(subject));
      }),
    );
  for (const [name, blocked] of [
    ["block", true],
    ["unblock", false],
  ] as const) {
    subjects
      .command(name)
      .description(
        blocked
          ? "refuse the subject's tokens (401 account disabled) from the next request on"
          : "accept the subject's tokens again",
      )
      .argument(...SUB_ARGUMENT)
      .action(
        action(async (ctx, sub: string) => {
          const answer = await ctx.client().call(blocked ? "PUT" : "DELETE", subjectPath(sub, "/blocked"));
          report(ctx, answer, `${sub}: ${blocked ? "blocked" : "unblocked"}`);
        }),
      );
  }
  subjects
    .command("tier")
    .description("give a subject a tier over its token's, or --clear it (effective on the next request)")
    .argument(...SUB_ARGUMENT)
    .argument("[tier]", "the tier")
    .option("--clear", "drop the tier set here: the token's tier (or EXTERNAL_DEFAULT_TIER) applies again")
    .action(action((ctx, sub: string, tier: string | undefined) => setTier(ctx, sub, tier)));

  const limits = subjects
    .command("limits")
    .description("a subject's own rate limits (subjects get shows them)");
  limits
    .command("set")
    .description("give a subject its own limits for some categories (the others follow its tier)")
    .argument(...SUB_ARGUMENT)
    .addArgument(limitsArgument())
    .action(
      action(async (ctx, sub: string, body: Record<string, string[] | null>) => {
        const answer = await ctx.client().call<SubjectJson>("PUT", subjectPath(sub, "/limits"), body);
        report(ctx, answer, `${sub}: own limits ${ownLimitsText(answer.own_limits)}`);
      }),
    );
  limits
    .command("reset")
    .description("a fresh start on the tier: the subject's own limits and every window counted so far go")
    .argument(...SUB_ARGUMENT)
    .action(
      action(async (ctx, sub: string) => {
        const answer = await ctx.client().call("DELETE", subjectPath(sub, "/limits"));
        report(ctx, answer, `${sub}: own limits and windows cleared`);
      }),
    );
}
