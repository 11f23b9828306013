// tollgate policy validate|show|reload, rls validate|show, and check (the dry run of a request).
import { type Command, Option } from "commander";
import { stringify } from "yaml";
import { Reader } from "../config/env-reader.js";
import { parseProviderTiers } from "../config/identity-settings.js";
import { RLS_ALGORITHMS, type RlsAlgorithm } from "../rls/model.js";
import { action, type Context, report } from "./context.js";
import { CliError, EXIT } from "./exit.js";
import { fields, json, print } from "./output.js";
import { type Validation, validatePolicy, validateRls } from "./validate.js";

type Explained = {
  status: number;
  decision: "allow" | "deny";
  reason: string;
  tier?: string;
  category?: string | null;
  limit?: number;
  remaining?: number;
  retry_after_seconds?: number;
  message?: string;
  headers: Record<string, string>;
};

/** Identity headers go to the upstream with an allowed request; the rest reach the client. */
const TO_UPSTREAM = new Set(["x-user-id", "x-user-tier", "x-session-id"]);

function validation(ctx: Context, result: Validation): void {
  if (result.ok) {
    print(ctx.json ? json({ valid: true, ...result.details }) : `${result.summary}\n`);
    return;
  }
  // Problems are the answer, not an error of the tool: stdout under --json, one a line on stderr otherwise.
  if (ctx.json) print(json({ valid: false, problems: result.problems }));
  else process.stderr.write(result.problems.map((p) => `${p}\n`).join(""));
  process.exitCode = EXIT.failed;
}

function headerLines(title: string, headers: [string, string][]): string {
  if (headers.length === 0) return "";
  return `${title}:\n${headers.map(([k, v]) => `  ${k}: ${v}\n`).join("")}`;
}

function explainText(answer: Explained): string {
  const about = [
    answer.tier === undefined ? undefined : `tier ${answer.tier}`,
    answer.category ? `category ${answer.category}` : undefined,
    answer.limit === undefined ? undefined : `${answer.remaining} of ${answer.limit} left`,
    answer.retry_after_seconds === undefined ? undefined : `retry after ${answer.retry_after_seconds} s`,
    answer.message,
  ].filter((part) => part !== undefined);
  const entries = Object.entries(answer.headers).filter(([, v]) => v !== "");
  const upstream = answer.decision === "allow" ? entries.filter(([k]) => TO_UPSTREAM.has(k)) : [];
  const client = entries.filter(([k]) => !upstream.some(([u]) => u === k));
  return (
    `${answer.decision} ${answer.status} (${answer.reason})${about.length > 0 ? `: ${about.join(", ")}` : ""}\n` +
    headerLines("headers to the upstream", upstream) +
    headerLines("headers to the client", client)
  );
}

/** The provider settings of this environment that name policy tiers, read as tollgate reads them. */
function providerTiers() {
  const reader = new Reader(process.env);
  const tiers = parseProviderTiers(reader);
  if (reader.problems.length > 0) {
    throw new CliError(EXIT.usage, "the provider settings in the environment are invalid", {
      details: reader.problems,
    });
  }
  return tiers;
}

export function policyCommands(program: Command): void {
  const policy = program
    .command("policy")
    .description("the policy: validate a file, show or reload the one in force");
  policy
    .command("validate")
    .description(
      "check a policy file offline, as tollgate would load it (exit 1 when invalid); with OIDC_ISSUER, JWKS_URL, EXTERNAL_DEFAULT_TIER or JWT_TIER_MAP set, also that it has the tiers they name",
    )
    .argument("<file>", "a policy file (YAML or JSON)")
    .action(action(async (ctx, file: string) => validation(ctx, validatePolicy(file, providerTiers()))));
  policy
    .command("show")
    .description("the policy in force, its version and source")
    .action(
      action(async (ctx) => {
        const answer = await ctx.client().call<Record<string, unknown>>("GET", "/admin/policy");
        if (ctx.json) return print(json(answer));
        const { policy: document, ...about } = answer;
        print(`${fields(Object.entries(about) as [string, string][])}\n${stringify(document)}`);
      }),
    );
  policy
    .command("reload")
    .description("re-read POLICY_FILE on the instance; an invalid file changes nothing (exit 1)")
    .action(
      action(async (ctx) => {
        const answer = await ctx
          .client()
          .call<{ message: string; version: string }>("POST", "/admin/policy/reload");
        report(ctx, answer, `${answer.message} (version ${answer.version})`);
      }),
    );

  const rls = program.command("rls").description("the rate limit service's configuration");
  rls
    .command("validate")
    .description("check an RLS configuration (a file or a folder) offline (exit 1 when invalid)")
    .argument("<path>", "a YAML file or a folder of them, as RLS_CONFIG takes it")
    .addOption(
      new Option("--algorithm <name>", "the default algorithm (RLS_ALGORITHM)")
        .choices(RLS_ALGORITHMS)
        .default("fixed-window"),
    )
    .action(
      action(async (ctx, path: string) =>
        validation(ctx, validateRls(path, ctx.options.algorithm as RlsAlgorithm)),
      ),
    );
  rls
    .command("show")
    .description("the RLS configuration in force, per domain, with its version")
    .action(
      action(async (ctx) => {
        const answer = await ctx.client().call<Record<string, unknown>>("GET", "/admin/rls");
        print(ctx.json ? json(answer) : stringify(answer));
      }),
    );

  program
    .command("check")
    .description("the decision tollgate would make for a request, counting nothing (exit 1 when denied)")
    .option("--method <method>", "the request's method", "GET")
    .requiredOption("--path <path>", "the request's path and query, e.g. /api/search?q=x")
    .option("--token <token>", "the caller's access token (sent as Authorization: Bearer)")
    .option("--authorization <header>", "the Authorization header as the proxy would pass it")
    .option("--ip <address>", "the client's address (default: this machine's, as the admin API sees it)")
    .action(
      action(async (ctx) => {
        const { method, path, token, ip } = ctx.options as Record<string, string | undefined>;
        const authorization =
          (ctx.options.authorization as string | undefined) ?? (token && `Bearer ${token}`);
        const body = { method, path, ...(authorization ? { authorization } : {}), ...(ip ? { ip } : {}) };
        const answer = await ctx.client().call<Explained>("POST", "/admin/check", body);
        print(ctx.json ? json(answer) : explainText(answer));
        if (answer.decision !== "allow") process.exitCode = EXIT.failed;
      }),
    );
}
