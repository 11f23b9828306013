// Prints a salted scrypt hash for USERS_FILE's password_hash. Reads the password from stdin, or asks
// for it twice without echo when stdin is a terminal.
// Usage: printf '%s' 'the password' | npm run --silent hash-password   (or: npm run --silent hash-password)
import { hashPassword } from "../dist/src/auth/passwords.js";

const HELP = `usage: printf '%s' 'the password' | npm run --silent hash-password
       npm run --silent hash-password          (asks for it on the terminal, without echo)
Prints a salted scrypt hash for the password_hash field of USERS_FILE.
`;

/** What was typed past the end of the previous answer (input that arrived before its prompt). */
let pending = "";

/**
 * Reads one line from the terminal without echoing it; Ctrl-C or Ctrl-D aborts. The terminal stays
 * raw (no echo) from before the prompt shows until the caller restores it, so nothing typed early,
 * or between two questions, is echoed.
 */
function askHidden(prompt) {
  return new Promise((resolve) => {
    const stdin = process.stdin;
    stdin.setRawMode(true);
    process.stderr.write(prompt);
    let typed = "";
    const take = (text) => {
      for (let i = 0; i < text.length; i += 1) {
        const char = text[i];
        if (char === "\r" || char === "\n") {
          pending = text.slice(i + 1).replace(/^\n/, "");
          stdin.off("data", onData);
          stdin.pause();
          process.stderr.write("\n");
          resolve(typed);
          return true;
        }
        if (char === "\u0003" || char === "\u0004") {
          stdin.setRawMode(false);
          process.stderr.write("\n");
          process.exit(130);
        }
        if (char === "\u007f" || char === "\b") typed = typed.slice(0, -1);
        else typed += char;
      }
      return false;
    };
    const onData = (chunk) => take(chunk.toString("utf8"));
    const before = pending;
    pending = "";
    if (take(before)) return;
    stdin.on("data", onData);
    stdin.resume();
  });
}

async function readPassword() {
  if (process.stdin.isTTY) {
    const first = await askHidden("password: ");
    const second = await askHidden("again: ");
    process.stdin.setRawMode(false);
    if (first !== second) {
      process.stderr.write("hash-password: the two passwords differ; nothing printed\n");
      process.exit(2);
    }
    return first;
  }
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  return Buffer.concat(chunks)
    .toString("utf8")
    .replace(/\r?\n$/, "");
}

const args = process.argv.slice(2);
if (args.includes("--help") || args.includes("-h")) {
  process.stdout.write(HELP);
  process.exit(0);
}
if (args.length > 0) {
  // Never take the password as an argument: it would land in the shell history and the process list.
  process.stderr.write(`hash-password: unknown argument; the password is read from stdin (--help)\n`);
  process.exit(2);
}
const password = await readPassword();
if (password === "") {
  process.stderr.write("hash-password: give the password on standard input\n");
  process.exit(2);
}
process.stdout.write(`${await hashPassword(password)}\n`);
