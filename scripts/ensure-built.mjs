// Builds dist/ only when a source is newer than the last complete build, so `npm start` starts at once.
// Usage: node scripts/ensure-built.mjs   (preupstream, prebench, prehash-password, the test setup;
// npm start calls it in its own process, scripts/start.mjs)
import { spawnSync } from "node:child_process";
import { existsSync, readdirSync, statSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

/** Written by scripts/copy-assets.mjs, the last step of `npm run build`: its time is the build's. */
export const STAMP = join("dist", ".build-stamp");
const INPUT_DIRS = ["src", "upstream"];
const INPUT_FILES = [
  "tsconfig.json",
  "tsconfig.build.json",
  "package.json",
  "scripts/bundle.mjs",
  "scripts/copy-assets.mjs",
];

function newestIn(path) {
  if (!existsSync(path)) return 0;
  const stat = statSync(path);
  if (!stat.isDirectory()) return stat.mtimeMs;
  let newest = stat.mtimeMs; // a deleted or renamed file changes its directory
  for (const name of readdirSync(path)) newest = Math.max(newest, newestIn(join(path, name)));
  return newest;
}

/** Why `root` needs a build, or undefined when dist/ is complete and newer than every source. */
export function staleReason(root) {
  const stamp = join(root, STAMP);
  if (!existsSync(stamp)) return "no complete build in dist/ yet";
  const built = statSync(stamp).mtimeMs;
  const newest = Math.max(...[...INPUT_DIRS, ...INPUT_FILES].map((p) => newestIn(join(root, p))));
  return newest > built ? "sources changed since the last build" : undefined;
}

/** Builds `root` when it is stale; exits the process when the build cannot run or fails. */
export function ensureBuilt(root = join(dirname(fileURLToPath(import.meta.url)), "..")) {
  const reason = staleReason(root);
  if (reason === undefined) return;
  let tsc;
  try {
    tsc = createRequire(join(root, "package.json")).resolve("typescript/bin/tsc");
  } catch {
    process.stderr.write(`tollgate: ${reason}, and TypeScript is not installed: run npm ci first\n`);
    process.exit(1);
  }
  process.stderr.write(`tollgate: building dist/ (${reason})\n`);
  const steps = [
    [tsc, "-p", "tsconfig.build.json"],
    [join(root, "scripts", "bundle.mjs")],
    [join(root, "scripts", "copy-assets.mjs")],
  ];
  for (const args of steps) {
    const result = spawnSync(process.execPath, args, { cwd: root, stdio: "inherit" });
    if (result.status !== 0) process.exit(result.status ?? 1);
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  if (process.argv.includes("--help")) {
    process.stdout.write(
      "usage: node scripts/ensure-built.mjs\nRuns the build when dist/ is missing or older than src/.\n",
    );
    process.exit(0);
  }
  ensureBuilt();
}
