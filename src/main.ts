// Composition root: settings → store → users → services → the three listeners; SIGTERM drains.
import type { Server } from "node:http";
import { createTollgate } from "./app.js";
import { demoUsers, loadUsers, readUsersFile, UsersFileError } from "./auth/users-file.js";
import { type Config, ConfigError, loadConfig } from "./config/env.js";
import { loadPolicy, type Policy, PolicyError } from "./config/policy.js";
import { createHttpServer } from "./http/server.js";
import { createLogger, type Logger } from "./logger.js";
import { createStore, type Store } from "./store/store.js";

function fail(lines: string[]): never {
  for (const line of lines) process.stderr.write(`tollgate: ${line}\n`);
  process.exit(1);
}

function startupSettings(): { config: Config; policy: Policy } {
  try {
    const config = loadConfig(process.env);
    return { config, policy: loadPolicy(config.policyFile) };
  } catch (error) {
    if (error instanceof ConfigError || error instanceof PolicyError) fail(error.problems);
    throw error;
  }
}

function listen(server: Server, port: number, host: string): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => {
      server.off("error", reject);
      resolve();
    });
  });
}

/** Loads USERS_FILE or the demo users, retrying while the store is unreachable. */
async function bootstrapUsers(config: Config, policy: Policy, store: Store, logger: Logger): Promise<void> {
  const entries = config.usersFile !== undefined ? await readUsersFile(config.usersFile, policy) : undefined;
  for (let attempt = 1; ; attempt += 1) {
    try {
      if (entries !== undefined) {
        await loadUsers(store.users, entries);
        logger.info({ event: "users_loaded", count: entries.length }, "users loaded from USERS_FILE");
      } else if (config.production) {
        if (!(await store.users.any()))
          fail(["USERS_FILE: required in production when the store holds no users"]);
      } else {
        await loadUsers(store.users, await demoUsers());
        logger.info(
          { event: "users_loaded", count: 3 },
          "demo users alice, bob_pro and ent_carol loaded (their password is in the README)",
        );
      }
      return;
    } catch (error) {
      if (error instanceof UsersFileError) throw error;
      if (attempt === 1)
        logger.warn(
          { event: "store_down", err: (error as Error).message },
          "store unreachable at start-up; retrying",
        );
      await new Promise((r) => setTimeout(r, Math.min(5_000, 200 * attempt)));
    }
  }
}

async function main(): Promise<void> {
  const { config, policy } = startupSettings();
  const logger = createLogger(config.logLevel);
  if (config.usersFile !== undefined) {
    // Validate before anything listens, so a bad file stops start-up with its own message.
    await readUsersFile(config.usersFile, policy).catch((error: unknown) => {
      if (error instanceof UsersFileError) fail(error.message.split("\n"));
      throw error;
    });
  }
  const store = createStore({
    redis: config.redis,
    timeoutMs: config.redisTimeoutMs,
    prefix: config.redisKeyPrefix,
  });
  if (store.kind === "memory") {
    logger.warn(
      { event: "memory_store" },
      "No Redis is configured (REDIS_URL, REDIS_CLUSTER_NODES or REDIS_SENTINELS): using the embedded in-memory store. Limits and sessions live in this one process and are lost on restart; run one instance only.",
    );
  }
  if (config.jwt.secretGenerated) {
    logger.warn(
      { event: "jwt_secret_generated" },
      "JWT_SECRET is unset: a random secret was generated; tokens end with this process",
    );
  }
  if (config.adminTokenGenerated) {
    process.stderr.write(`tollgate: ADMIN_TOKEN is unset; this run's admin token is ${config.adminToken}\n`);
  }

  const tollgate = createTollgate({ config, policy, store, logger });
  const servers: [string, Server, number][] = [
    ["public", createHttpServer(tollgate.publicApp), config.port],
    ["check", tollgate.checkServer, config.checkPort],
    ["admin", createHttpServer(tollgate.adminApp), config.adminPort],
  ];
  for (const [, server] of servers) {
    server.keepAliveTimeout = Math.max(server.keepAliveTimeout, 75_000);
    server.headersTimeout = Math.max(server.headersTimeout, 80_000);
  }
  await Promise.all(servers.map(([, server, port]) => listen(server, port, config.host)));
  logger.info(
    {
      event: "started",
      store: store.kind,
      ...(config.redis === undefined ? {} : { redisTopology: config.redis.topology.kind }),
      failureMode: config.failureMode,
      ports: { public: config.port, check: config.checkPort, admin: config.adminPort },
    },
    "tollgate listening",
  );
  const users = bootstrapUsers(config, policy, store, logger).catch((error: unknown) => {
    logger.fatal({ err: (error as Error).message }, "cannot load users");
    process.exit(1);
  });

  let stopping = false;
  const stop = (signal: string): void => {
    if (stopping) return;
    stopping = true;
    logger.info({ event: "stopping", signal }, "draining requests in flight");
    const force = setTimeout(() => {
      logger.warn({ event: "stop_forced" }, "requests still open after 10 s; exiting");
      process.exit(0);
    }, 10_000);
    force.unref();
    const closed = servers.map(
      ([, server]) =>
        new Promise<void>((resolve) => {
          server.close(() => resolve());
          server.closeIdleConnections();
        }),
    );
    void Promise.all([...closed, users])
      .then(() => store.close())
      .then(() => {
        logger.info({ event: "stopped" }, "stopped");
        process.exit(0);
      });
  };
  process.on("SIGTERM", () => stop("SIGTERM"));
  process.on("SIGINT", () => stop("SIGINT"));
}

main().catch((error: unknown) => {
  process.stderr.write(`tollgate: start-up failed: ${(error as Error).message}\n`);
  process.exit(1);
});
