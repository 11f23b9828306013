#!/usr/bin/env node
// The `tollgate` command (package.json bin): runs one command, prints one line per error, never a stack trace.
import { readFileSync } from "node:fs";
import { CommanderError } from "commander";
import { CliError, EXIT } from "./exit.js";
import { printable } from "./output.js";
import { buildProgram } from "./program.js";

/** dist/src/cli/main.js and src/cli/main.ts both sit three folders under package.json. */
function version(): string {
  try {
    const manifest = JSON.parse(readFileSync(new URL("../../../package.json", import.meta.url), "utf8"));
    return String(manifest.version);
  } catch {
    return "unknown";
  }
}

/** Commander has printed its own message (or the help) already; only the exit code is left. */
function commanderExit(error: CommanderError): number {
  const shown = ["commander.helpDisplayed", "commander.version"];
  return shown.includes(error.code) || error.exitCode === 0 ? EXIT.ok : EXIT.usage;
}

async function main(): Promise<void> {
  // `tollgate users list | head -1`: a reader that stops early is not an error.
  process.stdout.on("error", (error: NodeJS.ErrnoException) => {
    if (error.code === "EPIPE") process.exit(EXIT.ok);
    throw error;
  });
  const program = buildProgram(version());
  try {
    await program.parseAsync(process.argv);
  } catch (error) {
    if (error instanceof CommanderError) {
      process.exitCode = commanderExit(error);
      return;
    }
    if (error instanceof CliError) {
      // The message and details may repeat the admin API's words, which reach the terminal escaped.
      const details = error.details.map((d) => `  ${printable(d)}\n`).join("");
      process.stderr.write(`tollgate: ${printable(error.message)}\n${details}`);
      process.exitCode = error.exitCode;
      return;
    }
    // A bug of the CLI itself: still one line, with the error's name to report it by.
    const text = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
    process.stderr.write(`tollgate: unexpected error: ${text.split("\n")[0]}\n`);
    process.exitCode = EXIT.failed;
  }
}

await main();
