// Copies non-TypeScript runtime assets (Lua scripts, the gRPC listener's .proto files) next to the compiled JavaScript in dist/,
// makes the `tollgate` command (package.json bin) executable, then stamps the build as complete
// (scripts/ensure-built.mjs compares sources with the stamp).
import { chmodSync, cpSync, readdirSync, statSync, writeFileSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");

function walk(dir) {
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) walk(path);
    else if (name.endsWith(".lua") || name.endsWith(".proto"))
      cpSync(path, join(root, "dist", relative(root, path)));
  }
}
walk(join(root, "src"));
// tsc keeps the #! line but not an executable mode; npm links the bin as it is (npx tollgate in a checkout).
chmodSync(join(root, "dist", "src", "cli", "main.js"), 0o755);
writeFileSync(join(root, "dist", ".build-stamp"), `${new Date().toISOString()}\n`);
