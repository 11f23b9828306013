// The tollgate command tree: global options, every command group, help on each, completion scripts.
import { Argument, Command } from "commander";
import { accessCommands } from "./access-commands.js";
import { DEFAULT_ADMIN_URL } from "./admin-client.js";
import { apiKeysCommands } from "./api-keys-commands.js";
import { bashCompletion, zshCompletion } from "./completion.js";
import { print } from "./output.js";
import { policyCommands } from "./policy-commands.js";
import { subjectsCommands } from "./subjects-commands.js";
import { usersCommands } from "./users-commands.js";

/**
 * A run of 32 or more characters that a key's secret or a token is made of: commander repeats what it
 * could not parse ("unknown option '-zj52…'", when a pasted secret begins with "-"), and no option or
 * command name is that long.
 */
const SECRET_LIKE = /[A-Za-z0-9_.~+/=-]{32,}/g;

/** A usage error as commander words it, with anything that could be a secret left out. */
const withoutSecrets = (message: string): string =>
  message.replace(SECRET_LIKE, (run) => `(${run.length} characters, not shown)`);

const EPILOG = `
Exit codes: 0 ok; 1 invalid file, denied check or request refused by the admin API;
2 bad usage; 3 admin API unreachable, admin token refused or server failure.
The admin token comes from ADMIN_TOKEN (or --admin-token) and is never printed.`;

export function buildProgram(version: string): Command {
  const program = new Command("tollgate")
    .description(
      "operate tollgate: validate policy and RLS files offline, manage users, API keys and limits, dry-run checks",
    )
    .version(version, "-V, --version")
    .option("--url <url>", `the admin API (TOLLGATE_ADMIN_URL, default ${DEFAULT_ADMIN_URL})`)
    .option("--admin-token <token>", "the admin bearer token (prefer ADMIN_TOKEN: arguments show in ps)")
    .option("--json", "print JSON for scripts instead of tables")
    .showHelpAfterError("(run with --help for usage)")
    // Set before the commands are added: each inherits it.
    .configureOutput({ outputError: (message, write) => write(withoutSecrets(message)) })
    .configureHelp({ showGlobalOptions: true })
    .addHelpText("afterAll", EPILOG)
    // Usage errors exit 2; commander's default is 1, which the CLI keeps for failed validations.
    .exitOverride();

  policyCommands(program);
  usersCommands(program);
  accessCommands(program);
  apiKeysCommands(program);
  subjectsCommands(program);

  program
    .command("completion")
    .description("print a completion script: tollgate completion bash|zsh")
    .addArgument(new Argument("<shell>", "the shell").choices(["bash", "zsh"]))
    .action((shell: string) => print(shell === "bash" ? bashCompletion(program) : zshCompletion(program)));
  return program;
}
