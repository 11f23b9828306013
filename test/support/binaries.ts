// Finds the server binaries the tests run for real; under CI a missing one fails the run.
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";

const INSTALL_HINT =
  "install it with: apt-get update && apt-get install -y redis-server redis-sentinel nginx";

export function findBinary(name: string, extraPaths: readonly string[] = []): string {
  for (const path of extraPaths) if (existsSync(path)) return path;
  try {
    return execFileSync("sh", ["-c", `command -v ${name}`], { encoding: "utf8" }).trim();
  } catch {
    throw new Error(
      `${name} was not found on PATH. The tests run a real ${name} (never a mock); ${INSTALL_HINT}` +
        (process.env.CI === "true" ? " (CI=true: a missing binary fails the run)" : ""),
    );
  }
}
