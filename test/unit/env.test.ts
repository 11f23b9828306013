// Settings from the environment: defaults, validation, and production's stricter rules.
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { ConfigError, loadConfig } from "../../src/config/env.js";

function problems(env: Record<string, string>): string[] {
  try {
    loadConfig(env);
  } catch (error) {
    if (error instanceof ConfigError) return error.problems;
    throw error;
  }
  return [];
}

const SECRET = "s".repeat(32);

describe("settings", () => {
  it("have the specified defaults", () => {
    const config = loadConfig({});
    expect(config).toMatchObject({
      port: 8080,
      checkPort: 9191,
      adminPort: 9090,
      host: "0.0.0.0",
      upstreamPort: 8000,
      redis: undefined,
      redisTimeoutMs: 100,
      redisKeyPrefix: "tg:",
      failureMode: "open",
      sessionIdleTtlSeconds: 1800,
      sessionMaxAgeSeconds: 86_400,
      maxSessionsPerUser: 5,
      trustedProxyHops: 1,
      ipv6Subnet: 64,
      logLevel: "info",
      production: false,
      adminTokenGenerated: true,
    });
    expect(config.jwt).toMatchObject({ algorithms: ["HS256"], issuer: "tollgate", ttlSeconds: 86_400 });
    expect(config.jwt.secretGenerated).toBe(true);
    expect(config.jwt.secret?.length).toBeGreaterThanOrEqual(32);
  });

  it("report every problem at once, each naming its variable", () => {
    const found = problems({
      PORT: "http",
      CHECK_PORT: "70000",
      FAILURE_MODE: "sideways",
      REDIS_URL: "http://localhost:6379",
      JWT_SECRET: "short",
      LOG_LEVEL: "loud",
      MAX_SESSIONS_PER_USER: "0",
    });
    expect(found).toHaveLength(7);
    for (const name of [
      "PORT",
      "CHECK_PORT",
      "FAILURE_MODE",
      "REDIS_URL",
      "JWT_SECRET",
      "LOG_LEVEL",
      "MAX_SESSIONS_PER_USER",
    ]) {
      expect(
        found.some((p) => p.startsWith(`${name}:`)),
        name,
      ).toBe(true);
    }
  });

  it("never echo a secret in a message", () => {
    const found = problems({ JWT_SECRET: "hunter2-is-my-secret", ADMIN_TOKEN: "admin-token-too-short" });
    expect(found.join("\n")).not.toContain("hunter2");
    expect(found.join("\n")).not.toContain("admin-token-too-short");
  });

  it("refuse two listeners on one port", () => {
    expect(problems({ ADMIN_PORT: "8080" })).toEqual(["ADMIN_PORT: 8080 is already used by PORT"]);
  });

  it("require the secrets in production", () => {
    const found = problems({ NODE_ENV: "production" });
    expect(found).toContain("JWT_SECRET: required when NODE_ENV=production");
    expect(found).toContain("ADMIN_TOKEN: required when NODE_ENV=production");
    expect(problems({ NODE_ENV: "production", JWT_SECRET: SECRET, ADMIN_TOKEN: SECRET })).toEqual([]);
  });

  it("need key files for RS256 and read them", () => {
    expect(problems({ JWT_ALGORITHMS: "RS256" })).toEqual([
      "JWT_PRIVATE_KEY_FILE: required when JWT_ALGORITHMS includes RS256 or ES256",
      "JWT_PUBLIC_KEY_FILE: required when JWT_ALGORITHMS includes RS256 or ES256",
    ]);
    const dir = mkdtempSync(join(tmpdir(), "tollgate-"));
    writeFileSync(join(dir, "key.pem"), "PRIVATE");
    const config = loadConfig({
      JWT_ALGORITHMS: "rs256",
      JWT_PRIVATE_KEY_FILE: join(dir, "key.pem"),
      JWT_PUBLIC_KEY_FILE: join(dir, "key.pem"),
    });
    expect(config.jwt).toMatchObject({ algorithms: ["RS256"], privateKey: "PRIVATE", secret: undefined });
    expect(
      problems({ JWT_ALGORITHMS: "RS256", JWT_PRIVATE_KEY_FILE: "/nope", JWT_PUBLIC_KEY_FILE: "/nope" }),
    ).toContain('JWT_PRIVATE_KEY_FILE: cannot read "/nope" (ENOENT)');
  });

  it("reject an algorithm outside the supported list", () => {
    expect(problems({ JWT_ALGORITHMS: "none" })).toEqual([
      'JWT_ALGORITHMS: "NONE" is not supported (use HS256, HS384, HS512, RS256, ES256)',
    ]);
  });
});
