// Prints a salted scrypt hash for USERS_FILE's password_hash. Reads the password from stdin.
// Usage: printf '%s' 'the password' | npm run --silent hash-password
import { hashPassword } from "../dist/src/auth/passwords.js";

const chunks = [];
for await (const chunk of process.stdin) chunks.push(chunk);
const password = Buffer.concat(chunks)
  .toString("utf8")
  .replace(/\r?\n$/, "");
if (password === "") {
  console.error("hash-password: give the password on standard input");
  process.exit(2);
}
console.log(await hashPassword(password));
