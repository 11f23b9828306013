// Settings from the environment: defaults, validation, and production's stricter rules.
import { generateKeyPairSync, randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { availableParallelism, tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { ConfigError, loadConfig } from "../../src/config/env.js";
import { metricsExposureWarning } from "../../src/config/hosts.js";
import { SETTINGS } from "../../src/config/setting-names.js";
import { selfSignedCert } from "../support/self-signed.js";

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

/** A key pair written as PEM files, as JWT_PRIVATE_KEY_FILE and JWT_PUBLIC_KEY_FILE name them. */
function keyFiles(type: "rsa" | "ec", options: { modulusLength?: number; namedCurve?: string }) {
  const pair =
    type === "rsa"
      ? generateKeyPairSync("rsa", { modulusLength: options.modulusLength ?? 2048 })
      : generateKeyPairSync("ec", { namedCurve: options.namedCurve ?? "prime256v1" });
  const privatePem = pair.privateKey.export({ type: "pkcs8", format: "pem" }).toString();
  const dir = mkdtempSync(join(tmpdir(), "tollgate-keys-"));
  writeFileSync(join(dir, "private.pem"), privatePem);
  writeFileSync(join(dir, "public.pem"), pair.publicKey.export({ type: "spki", format: "pem" }).toString());
  return {
    privatePem,
    privateFile: join(dir, "private.pem"),
    publicFile: join(dir, "public.pem"),
  };
}

describe("settings", () => {
  it("have the specified defaults", () => {
    const config = loadConfig({});
    expect(config).toMatchObject({
      port: 8080,
      checkPort: 9191,
      adminPort: 9090,
      host: "127.0.0.1",
      redis: undefined,
      redisTimeoutMs: 100,
      redisKeyPrefix: "tg:",
      failureMode: "open",
      sessionIdleTtlSeconds: 1800,
      sessionMaxAgeSeconds: 86_400,
      maxSessionsPerUser: 5,
      loginLockout: { limit: 10, windowMs: 900_000 },
      trustedProxyHops: 1,
      workers: 1,
      ipv6Subnet: 64,
      logLevel: "info",
      logFormat: "auto",
      drainDelayMs: 5_000,
      denialCacheSize: 100_000,
      maxConnections: 10_000,
      production: false,
      adminTokenGenerated: true,
    });
    expect(config.jwt).toMatchObject({ algorithms: ["HS256"], issuer: "tollgate", ttlSeconds: 86_400 });
    expect(config.jwt.secretGenerated).toBe(true);
    expect(config.jwt.secret?.length).toBeGreaterThanOrEqual(32);
  });

  it("listen on loopback outside production when HOST is unset, on every interface in production", () => {
    expect(loadConfig({}).host).toBe("127.0.0.1");
    expect(loadConfig({ HOST: "0.0.0.0" }).host).toBe("0.0.0.0");
    const secrets = {
      JWT_SECRET: randomBytes(32).toString("hex"),
      ADMIN_TOKEN: randomBytes(32).toString("hex"),
    };
    expect(loadConfig({ NODE_ENV: "production", ...secrets }).host).toBe("0.0.0.0");
  });

  it("bind the check and admin listeners to HOST unless CHECK_HOST or ADMIN_HOST say otherwise", () => {
    expect(loadConfig({})).toMatchObject({
      host: "127.0.0.1",
      checkHost: "127.0.0.1",
      adminHost: "127.0.0.1",
    });
    expect(loadConfig({ HOST: "10.0.0.5" })).toMatchObject({
      host: "10.0.0.5",
      checkHost: "10.0.0.5",
      adminHost: "10.0.0.5",
    });
    expect(loadConfig({ HOST: "0.0.0.0", CHECK_HOST: "10.0.0.5", ADMIN_HOST: "::1" })).toMatchObject({
      host: "0.0.0.0",
      checkHost: "10.0.0.5",
      adminHost: "::1",
    });
    expect(loadConfig({ CHECK_HOST: "tollgate-check.internal" }).checkHost).toBe("tollgate-check.internal");
  });

  it("refuse a bind address that is neither an IP address nor a host name, naming the variable", () => {
    expect(problems({ HOST: "0.0.0.0:8080", CHECK_HOST: "[::1]", ADMIN_HOST: "10.0.0.256" })).toEqual([
      'HOST: expected an IP address (0.0.0.0, ::, 127.0.0.1, …) or a host name, without a port, got "0.0.0.0:8080"',
      'CHECK_HOST: write an IPv6 address without brackets (::1), got "[::1]"',
      'ADMIN_HOST: expected an IP address (0.0.0.0, ::, 127.0.0.1, …) or a host name, without a port, got "10.0.0.256"',
    ]);
  });

  it("warn in production when /metrics needs no token on an admin address other machines reach", () => {
    const production = {
      NODE_ENV: "production",
      JWT_SECRET: randomBytes(32).toString("hex"),
      ADMIN_TOKEN: randomBytes(32).toString("hex"),
    };
    const warning = (env: Record<string, string>) => metricsExposureWarning(loadConfig(env));
    // Production binds every interface by default.
    expect(warning(production)).toMatch(/^\/metrics answers anyone who reaches 0\.0\.0\.0 .*METRICS_TOKEN/);
    expect(warning({ ...production, HOST: "127.0.0.1", ADMIN_HOST: "10.0.0.5" })).toMatch(/10\.0\.0\.5/);
    expect(warning({ ...production, ADMIN_HOST: "::" })).toBeDefined();
    expect(warning({ ...production, ADMIN_HOST: "tollgate.internal" })).toBeDefined();
    for (const loopback of ["127.0.0.1", "127.0.0.53", "::1", "::ffff:127.0.0.1", "localhost"]) {
      expect(warning({ ...production, ADMIN_HOST: loopback }), loopback).toBeUndefined();
    }
    expect(warning({ ...production, HOST: "127.0.0.1" })).toBeUndefined();
    expect(warning({ ...production, METRICS_TOKEN: randomBytes(24).toString("base64url") })).toBeUndefined();
    expect(warning({ HOST: "0.0.0.0" })).toBeUndefined();
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

  it("take WORKERS as a count or auto, and refuse more than one worker without Redis", () => {
    const redis = { REDIS_URL: "redis://127.0.0.1:6379" };
    expect(loadConfig({ ...redis, WORKERS: "2" }).workers).toBe(2);
    expect(loadConfig({ ...redis, WORKERS: "AUTO" }).workers).toBe(availableParallelism());
    expect(loadConfig({ WORKERS: "1" }).workers).toBe(1);
    for (const bad of ["0", "-1", "two", "1.5", "257"]) {
      expect(problems({ ...redis, WORKERS: bad }), bad).toEqual([
        `WORKERS: expected "auto" or a whole number from 1 to 256, got "${bad}"`,
      ]);
    }
    expect(problems({ WORKERS: "2" })).toEqual([
      "WORKERS: more than one worker needs Redis (REDIS_URL, REDIS_CLUSTER_NODES or REDIS_SENTINELS); the memory store is one process only",
    ]);
  });

  it("read LOG_FORMAT and DRAIN_DELAY_MS, and name them when they are wrong", () => {
    expect(loadConfig({ LOG_FORMAT: "json", DRAIN_DELAY_MS: "0" })).toMatchObject({
      logFormat: "json",
      drainDelayMs: 0,
    });
    const found = problems({ LOG_FORMAT: "xml", DRAIN_DELAY_MS: "-1" });
    expect(found).toHaveLength(2);
    expect(found.join("\n")).toMatch(/LOG_FORMAT/);
    expect(found.join("\n")).toMatch(/DRAIN_DELAY_MS/);
  });

  it("take LOGIN_LOCKOUT as <count>/<duration>, 10/15m when unset, and name it when it is wrong", () => {
    expect(loadConfig({}).loginLockout).toEqual({ limit: 10, windowMs: 15 * 60_000 });
    expect(loadConfig({ LOGIN_LOCKOUT: "5/1h" }).loginLockout).toEqual({ limit: 5, windowMs: 3_600_000 });
    expect(loadConfig({ LOGIN_LOCKOUT: " 20/30s " }).loginLockout).toEqual({ limit: 20, windowMs: 30_000 });
    for (const bad of ["0/15m", "10", "10/15", "10/15x", "ten/15m", "10/8d", "[10/15m]", "10/15m,20/1h"]) {
      const found = problems({ LOGIN_LOCKOUT: bad });
      expect(found, bad).toHaveLength(1);
      expect(found[0], bad).toMatch(/^LOGIN_LOCKOUT: expected <count>\/<duration>/);
      expect(found[0], bad).toContain(`got "${bad}"`);
    }
  });

  it("refuse two listeners on one port", () => {
    expect(problems({ ADMIN_PORT: "8080" })).toEqual(["ADMIN_PORT: 8080 is already used by PORT"]);
    expect(problems({ GRPC_PORT: "9191" })).toEqual(["GRPC_PORT: 9191 is already used by CHECK_PORT"]);
  });

  it("put the gRPC listener on 8081 at CHECK_HOST, plaintext, unless told otherwise", () => {
    expect(loadConfig({})).toMatchObject({ grpcPort: 8081, grpcHost: "127.0.0.1", grpcTls: undefined });
    expect(loadConfig({ CHECK_HOST: "10.0.0.5" }).grpcHost).toBe("10.0.0.5");
    expect(loadConfig({ CHECK_HOST: "10.0.0.5", GRPC_HOST: "10.0.0.6", GRPC_PORT: "50051" })).toMatchObject({
      grpcHost: "10.0.0.6",
      grpcPort: 50051,
    });
  });

  it("take the gRPC listener's TLS certificate and key together, and name what is missing or unreadable", () => {
    const { cert, key } = selfSignedCert("tollgate-grpc-tls-");
    expect(loadConfig({ GRPC_TLS_CERT_FILE: cert, GRPC_TLS_KEY_FILE: key }).grpcTls).toEqual({
      cert: readFileSync(cert, "utf8"),
      key: readFileSync(key, "utf8"),
    });
    expect(problems({ GRPC_TLS_CERT_FILE: cert })).toEqual([
      "GRPC_TLS_CERT_FILE and GRPC_TLS_KEY_FILE: set both for TLS, or neither for plaintext",
    ]);
    const missing = join(mkdtempSync(join(tmpdir(), "tollgate-grpc-tls-")), "missing.pem");
    expect(problems({ GRPC_TLS_CERT_FILE: cert, GRPC_TLS_KEY_FILE: missing })).toEqual([
      `GRPC_TLS_KEY_FILE: cannot read "${missing}" (ENOENT)`,
    ]);
  });

  it("stop at start-up on a gRPC certificate or key that TLS would refuse, naming the file", () => {
    const { cert, key } = selfSignedCert("tollgate-grpc-tls-");
    const other = selfSignedCert("tollgate-grpc-tls-");
    const garbage = join(mkdtempSync(join(tmpdir(), "tollgate-grpc-tls-")), "garbage.pem");
    writeFileSync(garbage, "not PEM");
    expect(problems({ GRPC_TLS_CERT_FILE: cert, GRPC_TLS_KEY_FILE: other.key })).toEqual([
      "GRPC_TLS_KEY_FILE: not the private key of GRPC_TLS_CERT_FILE's certificate",
    ]);
    expect(problems({ GRPC_TLS_CERT_FILE: garbage, GRPC_TLS_KEY_FILE: garbage })).toEqual([
      "GRPC_TLS_CERT_FILE: not a PEM certificate",
      "GRPC_TLS_KEY_FILE: not a PEM private key",
    ]);
    // The key in the certificate's place, and the certificate in the key's.
    expect(problems({ GRPC_TLS_CERT_FILE: key, GRPC_TLS_KEY_FILE: cert })).toEqual([
      "GRPC_TLS_CERT_FILE: not a PEM certificate",
      "GRPC_TLS_KEY_FILE: not a PEM private key",
    ]);
  });

  it("take any admin and metrics token outside production, and require their length in production", () => {
    const short = { ADMIN_TOKEN: "dev-admin", METRICS_TOKEN: "dev-metrics" };
    expect(problems(short)).toEqual([]);
    expect(loadConfig(short)).toMatchObject({ adminToken: "dev-admin", metricsToken: "dev-metrics" });
    // A signing key is a signing key anywhere.
    expect(problems({ ...short, JWT_SECRET: "short-signing-key" })).toEqual([
      "JWT_SECRET: must be at least 32 bytes long",
    ]);
    expect(
      problems({ NODE_ENV: "production", JWT_SECRET: randomBytes(32).toString("hex"), ...short }),
    ).toEqual([
      "ADMIN_TOKEN: must be at least 32 bytes long",
      "METRICS_TOKEN: must be at least 16 bytes long",
    ]);
  });

  it("refuse an admin or metrics token no Authorization header can carry, anywhere, never echoing it", () => {
    const strong = randomBytes(32).toString("base64url");
    const passphrase = "correct horse battery staple, tollgate 2026";
    const unsendable = [passphrase, `é${strong}`, `${strong}\tx`, `${strong}\u0000`];
    for (const token of unsendable) {
      const modes: Record<string, string>[] = [{}, { NODE_ENV: "production", JWT_SECRET: strong }];
      for (const production of modes) {
        const found = problems({ ...production, ADMIN_TOKEN: token, METRICS_TOKEN: token });
        expect(found, JSON.stringify(token)).toEqual([
          expect.stringMatching(/^ADMIN_TOKEN: use visible ASCII characters only/),
          expect.stringMatching(/^METRICS_TOKEN: use visible ASCII characters only/),
        ]);
        expect(found.join("\n")).not.toContain(token);
      }
    }
    // Surrounding whitespace is trimmed, as for every setting: the token is what is left.
    expect(problems({ ADMIN_TOKEN: ` ${strong}\n`, METRICS_TOKEN: `${strong}~!` })).toEqual([]);
  });

  it("require the secrets in production", () => {
    const found = problems({ NODE_ENV: "production" });
    expect(found).toContain("JWT_SECRET: required when NODE_ENV=production");
    expect(found).toContain("ADMIN_TOKEN: required when NODE_ENV=production");
    const [jwt, admin] = [randomBytes(32).toString("base64"), randomBytes(32).toString("hex")];
    expect(problems({ NODE_ENV: "production", JWT_SECRET: jwt, ADMIN_TOKEN: admin })).toEqual([]);
  });

  it("refuse in production secrets published in the repository or too predictable, naming the variable", () => {
    const strong = randomBytes(32).toString("base64");
    const found = problems({
      NODE_ENV: "production",
      JWT_SECRET: "demo-only-jwt-secret-do-not-use-in-production",
      ADMIN_TOKEN: SECRET,
      METRICS_TOKEN: "0123456789abcdef0123456789abcdef",
    });
    expect(found).toEqual([
      expect.stringMatching(/^ADMIN_TOKEN: too predictable/),
      expect.stringMatching(/^JWT_SECRET: this value is published in tollgate's repository/),
      expect.stringMatching(/^METRICS_TOKEN: too predictable/),
    ]);
    expect(found.join("\n")).not.toContain("demo-only");
    // Outside production the same values only need their length (tests and demos use them).
    expect(
      problems({ JWT_SECRET: "demo-only-jwt-secret-do-not-use-in-production", ADMIN_TOKEN: SECRET }),
    ).toEqual([]);
    expect(problems({ NODE_ENV: "production", JWT_SECRET: strong, ADMIN_TOKEN: `${strong}x` })).toEqual([]);
  });

  it("refuse in production a short run repeated with a character or a few added, naming the variable", () => {
    const strong = randomBytes(32).toString("base64");
    for (const weak of [
      "changeme-changeme-changeme-changeme-1",
      "Passw0rd!Passw0rd!Passw0rd!Passw0rd!x",
      "x-Passw0rd!Passw0rd!Passw0rd!Passw0rd!",
      "tollgate1tollgate2tollgate3tollgate4",
    ]) {
      expect(problems({ NODE_ENV: "production", JWT_SECRET: strong, ADMIN_TOKEN: weak }), weak).toEqual([
        expect.stringMatching(/^ADMIN_TOKEN: too predictable/),
      ]);
    }
  });

  it("need key files for RS256 and read them", () => {
    expect(problems({ JWT_ALGORITHMS: "RS256" })).toEqual([
      "JWT_PRIVATE_KEY_FILE: required when JWT_ALGORITHMS includes RS256 or ES256",
      "JWT_PUBLIC_KEY_FILE: required when JWT_ALGORITHMS includes RS256 or ES256",
    ]);
    const rsa = keyFiles("rsa", { modulusLength: 2048 });
    const config = loadConfig({
      JWT_ALGORITHMS: "rs256",
      JWT_PRIVATE_KEY_FILE: rsa.privateFile,
      JWT_PUBLIC_KEY_FILE: rsa.publicFile,
    });
    expect(config.jwt).toMatchObject({
      algorithms: ["RS256"],
      privateKey: rsa.privatePem,
      secret: undefined,
    });
    expect(
      problems({ JWT_ALGORITHMS: "RS256", JWT_PRIVATE_KEY_FILE: "/nope", JWT_PUBLIC_KEY_FILE: "/nope" }),
    ).toContain('JWT_PRIVATE_KEY_FILE: cannot read "/nope" (ENOENT)');
  });

  it("stop at start-up on key files that would fail every login or every token, naming the file", () => {
    const rsa = keyFiles("rsa", { modulusLength: 2048 });
    const other = keyFiles("rsa", { modulusLength: 2048 });
    const small = keyFiles("rsa", { modulusLength: 1024 });
    const p256 = keyFiles("ec", { namedCurve: "prime256v1" });
    const p384 = keyFiles("ec", { namedCurve: "secp384r1" });
    const env = (algorithms: string, pair: { privateFile: string }, publicFile: string) => ({
      JWT_ALGORITHMS: algorithms,
      JWT_PRIVATE_KEY_FILE: pair.privateFile,
      JWT_PUBLIC_KEY_FILE: publicFile,
    });
    expect(problems(env("RS256", rsa, other.publicFile))).toEqual([
      "JWT_PUBLIC_KEY_FILE: not the public half of JWT_PRIVATE_KEY_FILE (no token signed with it would verify)",
    ]);
    expect(problems(env("ES256", rsa, rsa.publicFile))).toEqual([
      "JWT_PRIVATE_KEY_FILE: ES256 signs with an EC key on curve P-256, this is a 2048-bit RSA key",
    ]);
    expect(problems(env("RS256", p256, p256.publicFile))).toEqual([
      "JWT_PRIVATE_KEY_FILE: RS256 signs with an RSA key of at least 2048 bits, this is an EC key on curve prime256v1",
    ]);
    expect(problems(env("RS256", small, small.publicFile))).toEqual([
      "JWT_PRIVATE_KEY_FILE: RS256 signs with an RSA key of at least 2048 bits, this is a 1024-bit RSA key",
    ]);
    expect(problems(env("ES256", p384, p384.publicFile))).toEqual([
      "JWT_PRIVATE_KEY_FILE: ES256 signs with an EC key on curve P-256, this is an EC key on curve secp384r1",
    ]);
    const garbage = join(mkdtempSync(join(tmpdir(), "tollgate-")), "garbage.pem");
    writeFileSync(garbage, "not a key");
    expect(problems(env("RS256", { privateFile: garbage }, garbage))).toEqual([
      "JWT_PRIVATE_KEY_FILE: not a PEM private key",
      "JWT_PUBLIC_KEY_FILE: not a PEM public key",
    ]);
    // The pairs that sign: ES256 on P-256, and RS256 with ES256 also allowed.
    expect(problems(env("ES256", p256, p256.publicFile))).toEqual([]);
    expect(problems(env("RS256,ES256", rsa, rsa.publicFile))).toEqual([]);
  });

  it("reject an algorithm outside the supported list", () => {
    expect(problems({ JWT_ALGORITHMS: "none" })).toEqual([
      'JWT_ALGORITHMS: "NONE" is not supported (use HS256, HS384, HS512, RS256, ES256)',
    ]);
  });

  it("take the provider token cache's size and the at+jwt requirement, and name them when they are wrong", () => {
    const provider = {
      JWKS_URL: "https://idp.example/jwks",
      JWT_ISSUER: "https://idp.example/",
      JWT_AUDIENCE: "api",
    };
    expect(loadConfig(provider).identity.provider).toMatchObject({ cacheSize: 10_000, requireAtJwt: false });
    expect(
      loadConfig({ ...provider, JWT_PROVIDER_CACHE_SIZE: "250", JWT_PROVIDER_REQUIRE_AT_JWT: "TRUE" })
        .identity.provider,
    ).toMatchObject({ cacheSize: 250, requireAtJwt: true });
    for (const size of ["0", "100001", "-5", "1e4", "lots"]) {
      expect(problems({ ...provider, JWT_PROVIDER_CACHE_SIZE: size })).toEqual([
        `JWT_PROVIDER_CACHE_SIZE: expected a whole number from 1 to 100000, got "${size}"`,
      ]);
    }
    expect(problems({ ...provider, JWT_PROVIDER_REQUIRE_AT_JWT: "yes" })).toEqual([
      'JWT_PROVIDER_REQUIRE_AT_JWT: expected one of true, false, got "yes"',
    ]);
  });

  it("let a discovery document name a plain-http jwks_uri on any host outside production or with JWT_PROVIDER_ALLOW_HTTP only", () => {
    const oidc = {
      OIDC_ISSUER: "http://127.0.0.1:8180/realms/acme",
      JWT_ISSUER: "https://idp/",
      JWT_AUDIENCE: "a",
    };
    const production = {
      ...oidc,
      NODE_ENV: "production",
      JWT_SECRET: randomBytes(32).toString("hex"),
      ADMIN_TOKEN: randomBytes(32).toString("hex"),
    };
    const anyHost = (env: Record<string, string>) => {
      const source = loadConfig(env).identity.provider?.source;
      return source?.kind === "oidc" ? source.httpAnyHost : undefined;
    };
    expect(anyHost(oidc)).toBe(true);
    expect(anyHost(production)).toBe(false);
    expect(anyHost({ ...production, JWT_PROVIDER_ALLOW_HTTP: "true" })).toBe(true);
  });

  it("take JWT_AUDIENCE as a comma-separated list of the provider tokens' audiences, and name an empty item", () => {
    const provider = { JWKS_URL: "https://idp.example/jwks", JWT_ISSUER: "https://idp.example/" };
    expect(loadConfig({ ...provider, JWT_AUDIENCE: "api://tollgate" }).identity.provider?.audiences).toEqual([
      "api://tollgate",
    ]);
    expect(
      loadConfig({ ...provider, JWT_AUDIENCE: "api://tollgate, 6e74172b-be56-4843-9ff4-e66a39bb12e3" })
        .identity.provider?.audiences,
    ).toEqual(["api://tollgate", "6e74172b-be56-4843-9ff4-e66a39bb12e3"]);
    for (const value of ["api,", ",api", "a,,b", " , "]) {
      expect(problems({ ...provider, JWT_AUDIENCE: value })).toEqual([
        "JWT_AUDIENCE: expected <audience>,… with no empty item",
      ]);
    }
  });

  it("take the clock tolerance for tollgate's tokens and the provider's alike: 5 s by default, 0 to 300", () => {
    const provider = {
      JWKS_URL: "https://idp.example/jwks",
      JWT_ISSUER: "https://idp.example/",
      JWT_AUDIENCE: "api",
    };
    expect(loadConfig({}).jwt.clockToleranceSeconds).toBe(5);
    expect(loadConfig(provider).identity.provider?.clockToleranceSeconds).toBe(5);
    for (const seconds of [0, 30, 300]) {
      const config = loadConfig({ ...provider, JWT_CLOCK_TOLERANCE_SECONDS: ` ${seconds} ` });
      expect(config.jwt.clockToleranceSeconds).toBe(seconds);
      expect(config.identity.provider?.clockToleranceSeconds).toBe(seconds);
    }
    // One line however many token kinds read it.
    for (const value of ["301", "-1", "2.5", "5s", "1e2", "soon"]) {
      expect(problems({ ...provider, JWT_CLOCK_TOLERANCE_SECONDS: value })).toEqual([
        `JWT_CLOCK_TOLERANCE_SECONDS: expected a whole number from 0 to 300, got "${value}"`,
      ]);
    }
  });
});

describe("redis settings", () => {
  it("choose one Redis, a cluster from its seed nodes, or a Sentinel-managed master", () => {
    expect(loadConfig({ REDIS_URL: "redis://127.0.0.1:6379/0" }).redis?.topology).toEqual({
      kind: "single",
      url: "redis://127.0.0.1:6379/0",
    });
    expect(loadConfig({ REDIS_CLUSTER_NODES: "10.0.0.1:7000, redis-b:7001,[::1]:7002" }).redis).toEqual({
      topology: {
        kind: "cluster",
        nodes: [
          { host: "10.0.0.1", port: 7000 },
          { host: "redis-b", port: 7001 },
          { host: "::1", port: 7002 },
        ],
      },
      username: undefined,
      password: undefined,
      tls: false,
      sentinelPassword: undefined,
    });
    expect(
      loadConfig({
        REDIS_SENTINELS: "s1:26379,s2:26379,s3:26379",
        REDIS_SENTINEL_MASTER: "mymaster",
        REDIS_USERNAME: "tollgate",
        REDIS_PASSWORD: "p4ss",
        REDIS_TLS: "true",
        REDIS_SENTINEL_PASSWORD: "s3nt",
      }).redis,
    ).toEqual({
      topology: {
        kind: "sentinel",
        master: "mymaster",
        sentinels: ["s1", "s2", "s3"].map((host) => ({ host, port: 26379 })),
      },
      username: "tollgate",
      password: "p4ss",
      tls: true,
      sentinelPassword: "s3nt",
    });
  });

  it("refuse more than one topology at start-up, naming each variable that was set", () => {
    const both = "REDIS_URL, REDIS_CLUSTER_NODES: set only one of them";
    expect(problems({ REDIS_URL: "redis://a:6379", REDIS_CLUSTER_NODES: "b:7000" })[0]).toMatch(
      new RegExp(`^${both}`),
    );
    expect(
      problems({ REDIS_URL: "redis://a:6379", REDIS_CLUSTER_NODES: "b:7000", REDIS_SENTINELS: "c:26379" }),
    ).toEqual([
      "REDIS_URL, REDIS_CLUSTER_NODES, REDIS_SENTINELS: set only one of them (one Redis, a Redis Cluster, or Sentinel)",
    ]);
    expect(problems({ REDIS_CLUSTER_NODES: "b:7000", REDIS_SENTINELS: "c:26379" })[0]).toMatch(
      /^REDIS_CLUSTER_NODES, REDIS_SENTINELS: set only one/,
    );
  });

  it("report malformed nodes, a missing master name and options with no Redis to apply to", () => {
    expect(problems({ REDIS_CLUSTER_NODES: "a:7000,b,c:99999" })).toEqual([
      'REDIS_CLUSTER_NODES: expected host:port[,host:port...], got "b"',
      'REDIS_CLUSTER_NODES: expected host:port[,host:port...], got "c:99999"',
    ]);
    expect(problems({ REDIS_SENTINELS: "s1:26379" })).toEqual([
      "REDIS_SENTINEL_MASTER: required with REDIS_SENTINELS (the master's name in Sentinel)",
    ]);
    expect(problems({ REDIS_SENTINEL_MASTER: "mymaster" })).toEqual([
      "REDIS_SENTINEL_MASTER: only used with REDIS_SENTINELS",
    ]);
    expect(problems({ REDIS_PASSWORD: "hunter2-secret" })).toEqual([
      "REDIS_PASSWORD: set REDIS_URL, REDIS_CLUSTER_NODES or REDIS_SENTINELS to use it",
    ]);
    expect(problems({ REDIS_URL: "redis://a:6379", REDIS_TLS: "true" })).toEqual([
      "REDIS_TLS: with REDIS_URL, ask for TLS with a rediss:// URL",
    ]);
    expect(problems({ REDIS_CLUSTER_NODES: "a:7000", REDIS_TLS: "yes" })).toEqual([
      'REDIS_TLS: expected true or false, got "yes"',
    ]);
  });

  it("take REDIS_URL's path as the database number, and refuse one that is not a whole number", () => {
    for (const url of ["redis://a:6379", "redis://a:6379/", "redis://a:6379/15", "redis://a:6379?db=2"])
      expect(problems({ REDIS_URL: url }), url).toEqual([]);
    expect(problems({ REDIS_URL: "redis://a:6379/-1" })).toEqual([
      'REDIS_URL: the path names the database, a whole number from 0 (redis://host:6379/0), got "-1"',
    ]);
    expect(problems({ REDIS_URL: "redis://:hunter2-secret@a:6379/cache" })).toEqual([
      'REDIS_URL: the path names the database, a whole number from 0 (redis://host:6379/0), got "cache"',
    ]);
    expect(problems({ REDIS_URL: "redis://a:6379/1/2" })[0]).toMatch(
      /^REDIS_URL: the path names the database/,
    );
    expect(problems({ REDIS_URL: "redis://a:6379?db=one" })).toEqual([
      'REDIS_URL: the db parameter names the database, a whole number from 0 (redis://host:6379/0), got "one"',
    ]);
  });

  it("never echo the Redis passwords in a message", () => {
    const found = problems({ REDIS_PASSWORD: "hunter2-secret", REDIS_SENTINEL_PASSWORD: "other-secret" });
    expect(found).toHaveLength(2);
    expect(found.join("\n")).not.toMatch(/hunter2|other-secret/);
  });
});

describe("variables that look like settings but are none", () => {
  const unknown = (env: Record<string, string>) =>
    loadConfig(env).unknownSettings.map(({ variable, closest }) => `${variable} → ${closest}`);

  it("are each reported with the closest setting: typos, other Redis clients' names, unknown names under a prefix", () => {
    expect(
      unknown({
        REDIS_ULR: "redis://127.0.0.1:6379",
        LOG_LEVLE: "debug",
        WORKER: "2",
        redis_url: "redis://127.0.0.1:6379",
        REDIS_HOST: "127.0.0.1",
        JWT_SECRET_FILE: "/run/secrets/jwt",
      }),
    ).toEqual([
      "JWT_SECRET_FILE → JWT_SECRET",
      "LOG_LEVLE → LOG_LEVEL",
      "REDIS_HOST → REDIS_URL",
      "REDIS_ULR → REDIS_URL",
      "WORKER → WORKERS",
      "redis_url → REDIS_URL",
    ]);
    expect(loadConfig({ REDIS_ULR: "x" }).unknownSettings).toEqual([
      { variable: "REDIS_ULR", closest: "REDIS_URL", likelyTypo: true },
    ]);
  });

  it("leave the environment's other variables alone, and every setting", () => {
    const others = {
      PATH: "/usr/bin",
      HOME: "/home/tollgate",
      HOSTNAME: "tollgate-0",
      USER: "node",
      PWD: "/app",
      SHELL: "/bin/sh",
      TERM: "xterm",
      LANG: "C.UTF-8",
      TZ: "UTC",
      NODE_OPTIONS: "--max-old-space-size=512",
      NODE_VERSION: "24",
      DEBUG: "",
      CI: "true",
      DOCKER_HOST: "unix:///var/run/docker.sock",
      SESSION_MANAGER: "local/laptop:@/tmp/.ICE-unix/1234",
      GRPC_VERBOSITY: "ERROR",
      GRPC_DEFAULT_SSL_ROOTS_FILE_PATH: "/etc/ssl/roots.pem",
      OTEL_EXPORTER_OTLP_ENDPOINT: "http://collector:4318",
      npm_lifecycle_event: "start",
      npm_config_cache: "/home/tollgate/.npm",
      http_proxy: "http://proxy:3128",
      // Kubernetes links every service of the namespace, a Redis service's too.
      REDIS_SERVICE_HOST: "10.0.0.7",
      REDIS_SERVICE_PORT: "6379",
      REDIS_SERVICE_PORT_REDIS: "6379",
      REDIS_PORT: "tcp://10.0.0.7:6379",
      REDIS_PORT_6379_TCP: "tcp://10.0.0.7:6379",
      REDIS_PORT_6379_TCP_ADDR: "10.0.0.7",
      KUBERNETES_SERVICE_HOST: "10.0.0.1",
    };
    expect(unknown(others)).toEqual([]);
    const settings = Object.fromEntries(SETTINGS.map((name) => [name, ""]));
    expect(loadConfig(settings).unknownSettings).toEqual([]);
  });
});
