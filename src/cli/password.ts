// A new password for the admin API, from standard input (--password-stdin) or asked twice on the terminal
// without echo; never from the command line, where it would land in the shell history and the process list.
import { CliError, EXIT } from "./exit.js";

const ENTER = new Set(["\r", "\n"]);
const ABORT = new Set(["\u0003", "\u0004"]);
const ERASE = new Set(["\u007f", "\b"]);

/** One line typed on the terminal, not echoed; Ctrl-C or Ctrl-D aborts with exit code 2. */
function askHidden(prompt: string): Promise<string> {
  const stdin = process.stdin;
  return new Promise((resolve, reject) => {
    let typed = "";
    const done = (finish: () => void) => {
      stdin.off("data", onData);
      stdin.setRawMode(false);
      stdin.pause();
      process.stderr.write("\n");
      finish();
    };
    const onData = (chunk: Buffer) => {
      for (const char of chunk.toString("utf8")) {
        if (ENTER.has(char)) return done(() => resolve(typed));
        if (ABORT.has(char)) return done(() => reject(new CliError(EXIT.usage, "no password given")));
        typed = ERASE.has(char) ? typed.slice(0, -1) : typed + char;
      }
    };
    stdin.setRawMode(true);
    process.stderr.write(prompt);
    stdin.on("data", onData);
    stdin.resume();
  });
}

/** Far beyond the admin API's longest password (1024 characters), short of what a wrong pipe sends. */
const MAX_STDIN_BYTES = 64 * 1024;

async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  let bytes = 0;
  for await (const chunk of process.stdin) {
    // A pipe that never ends (`yes |`, a log tailed by mistake) would be read, and kept, forever.
    bytes += (chunk as Buffer).length;
    if (bytes > MAX_STDIN_BYTES)
      throw new CliError(EXIT.usage, "standard input holds more than a password: give the password alone");
    chunks.push(chunk as Buffer);
  }
  // One trailing newline is the end of the line (echo, a here-string), not part of the password.
  return Buffer.concat(chunks)
    .toString("utf8")
    .replace(/\r?\n$/, "");
}

export async function readPassword(options: { stdin: boolean }): Promise<string> {
  let password: string;
  if (options.stdin) {
    password = await readStdin();
  } else if (process.stdin.isTTY) {
    password = await askHidden("new password: ");
    if ((await askHidden("again: ")) !== password)
      throw new CliError(EXIT.usage, "the two passwords differ; nothing changed");
  } else {
    throw new CliError(
      EXIT.usage,
      "standard input is not a terminal: give the password with --password-stdin",
    );
  }
  if (password === "") throw new CliError(EXIT.usage, "the password is empty");
  return password;
}
