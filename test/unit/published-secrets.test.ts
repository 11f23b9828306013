// Every secret value written in this repository is refused in production: a scan keeps the list whole.
import { randomBytes } from "node:crypto";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { ConfigError, loadConfig } from "../../src/config/env.js";
import { PUBLISHED_SECRETS } from "../../src/config/secrets.js";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const SKIP = new Set(["node_modules", "dist", ".git", "coverage", "results"]);
const TEXT =
  /\.(ts|mts|mjs|js|json|ya?ml|md|sh|conf|template|example|env)$|^(Dockerfile|run|\.env\.example)$/;
const NAMES = "JWT_SECRET|ADMIN_TOKEN|METRICS_TOKEN";

function* files(dir: string): Generator<string> {
  for (const name of readdirSync(dir)) {
    if (SKIP.has(name) || name === "package-lock.json") continue;
    const path = join(dir, name);
    if (statSync(path).isDirectory()) yield* files(path);
    else if (TEXT.test(name)) yield path;
  }
}

/**
 * Values assigned to a secret's name: string literals, compose `${NAME:-value}` fallbacks, env lines
 * (`NAME=value`, also after `export` or `-e`), and literals held first in a variable or field whose
 * name says token or secret in any case (`const fileToken = "…"`, later written as `ADMIN_TOKEN=${…}`).
 */
function assignedSecrets(text: string): string[] {
  const found: string[] = [];
  const patterns = [
    new RegExp(`\\w*(?:${NAMES})\\w*["']?\\s*[:=]\\s*["'\`]([^"'\`\\s]{8,})["'\`]`, "g"),
    new RegExp(`\\$\\{(?:${NAMES}):?-([^}]+)\\}`, "g"),
    new RegExp(`^\\s*#?\\s*(?:${NAMES})=([^\\s$#]+)`, "gm"),
    new RegExp(`\\b(?:${NAMES})=([^\\s$#"'\`]+)`, "g"),
    // Template literals (`${…}`) are code, not values: `$` is left out of the value.
    /\w*(?:secret|token)\w*["']?\s*[:=]\s*["'`]([^"'`\s$]{8,})["'`]/gi,
  ];
  for (const pattern of patterns) for (const match of text.matchAll(pattern)) found.push(match[1] as string);
  return found;
}

/** The problem production reports for `value` as JWT_SECRET, if any. */
function productionProblem(value: string): string | undefined {
  const other = randomBytes(32).toString("base64");
  try {
    loadConfig({ NODE_ENV: "production", JWT_SECRET: value, ADMIN_TOKEN: other });
  } catch (error) {
    if (error instanceof ConfigError) return error.problems.find((p) => p.startsWith("JWT_SECRET:"));
    throw error;
  }
  return undefined;
}

describe("secrets published in the repository", () => {
  const found = new Map<string, string>();
  for (const file of files(ROOT)) {
    for (const value of assignedSecrets(readFileSync(file, "utf8"))) found.set(value, relative(ROOT, file));
  }

  it("finds the secret values the repository assigns (the scan itself works)", () => {
    expect(found.get("demo-only-admin-token-not-for-production")).toBe("docker-compose.yml");
    expect(found.has("test-jwt-secret-0123456789-abcdefghij")).toBe(true);
    // The tests' and the bench's one set, in a .mjs file.
    expect(found.get("test-admin-token-0123456789-abcdefghij")).toBe("test/support/secrets.mjs");
    // Held in a variable first and only then written to an env file as ADMIN_TOKEN.
    expect(found.get("admin-token-from-the-env-file-0123456789")).toBe("test/e2e/lifecycle.test.ts");
  });

  it("refuses every one of them in production", () => {
    const accepted = [...found].filter(([value]) => productionProblem(value) === undefined);
    expect(accepted, "add these to PUBLISHED_SECRETS in src/config/secrets.ts").toEqual([]);
  });

  it("lists no value twice and refuses each listed value", () => {
    for (const value of PUBLISHED_SECRETS) {
      expect(productionProblem(value), value).toMatch(/published in tollgate's repository/);
    }
  });

  it("accepts random secrets of 32 bytes and more in any common encoding", () => {
    for (let i = 0; i < 200; i += 1) {
      for (const value of [
        randomBytes(32).toString("base64"),
        randomBytes(24).toString("base64url"),
        randomBytes(16).toString("hex"),
        randomBytes(32).toString("hex"),
      ]) {
        expect(productionProblem(value), value).toBeUndefined();
      }
    }
  });
});
