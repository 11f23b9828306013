// Composition root: .env → settings → logger → store → listeners → users → ready; SIGTERM drains.
import { existsSync } from "node:fs";
import { isatty } from "node:tty";
import { fileURLToPath } from "node:url";
import { createTollgate } from "./app.js";
import { withSharedJwtSecret } from "./auth/jwt-secret.js";
import { createLockout } from "./auth/lockout.js";
import { sweepOrphanKeys } from "./auth/user-keys.js";
import { readUsersFile, type UsersFileEntry, UsersFileError } from "./auth/users-file.js";
import { logNameAdoption, removeDemoUsers, seedDemoUsers, syncUsersFile } from "./auth/users-sync.js";
import { type Config, ConfigError, loadConfig } from "./config/env.js";
import { metricsExposureWarning } from "./config/hosts.js";
import { providerTierProblems } from "./config/identity-settings.js";
import { createListeners } from "./listeners.js";
import { PolicyError } from "./policy/policy.js";
import { keepCompiledCode } from "./process/hot-code.js";
import { listenProblem } from "./process/listen-problem.js";
import { adminTokenNotice, createProcessLogger, fdWriter, type Logger } from "./process/logger.js";
import { stopWithNpm } from "./process/parent-watch.js";
import { createReadiness, type Readiness } from "./process/readiness.js";
import { stopOnSignals } from "./process/shutdown.js";
import { warnEvictingNodes, warnUnknownSettings } from "./process/start-warnings.js";
import { applyReloads, askForReloads, logHandedOver, startSources } from "./process/worker-reloads.js";
import { isWorker, reportListening, shouldSupervise, superviseWorkers } from "./process/workers.js";
import {
  logWorkerReload,
  type ReloadSources,
  readReloadSources,
  reloadFromSources,
  startupStates,
} from "./reloads.js";
import { RlsConfigError } from "./rls/model.js";
import { storeErrorText, storeTimeouts } from "./store/failure.js";
import { createStore, type Store } from "./store/store.js";
import type { Tracing } from "./tracing/tracing.js";

keepCompiledCode();
const stderr = fdWriter(2);

function fail(lines: string[]): never {
  for (const line of lines) stderr.write(`tollgate: ${line}\n`);
  process.exit(1);
}

/** Loads ENV_FILE (default `.env`) when it exists; variables already in the environment win. */
function loadEnvFile(): void {
  const given = process.env.ENV_FILE;
  const file = given ?? ".env";
  if (file === "") return;
  if (!existsSync(file)) {
    if (given !== undefined) fail([`ENV_FILE: "${file}" does not exist`]);
    return;
  }
  try {
    process.loadEnvFile(file);
  } catch (error) {
    fail([`ENV_FILE: cannot read "${file}" (${(error as NodeJS.ErrnoException).code ?? "error"})`]);
  }
}

function startupSettings(handed: ReloadSources | undefined) {
  try {
    const config = loadConfig(process.env);
    const { policy, rls, sources } = startupStates(config, handed);
    const provider = config.identity.provider;
    // The same check refuses a reload (src/app.ts), so a policy that reloaded also starts.
    const unmet = provider === undefined ? [] : providerTierProblems(provider, policy.tiers.keys());
    if (unmet.length > 0) fail(unmet);
    return { config, policy, rls, sources };
  } catch (error) {
    // An RLS problem names its file (relative to RLS_CONFIG's folder) and line: the variable goes first.
    if (error instanceof RlsConfigError) fail(error.problems.map((problem) => `RLS_CONFIG: ${problem}`));
    if (error instanceof ConfigError || error instanceof PolicyError) fail(error.problems);
    throw error;
  }
}

/**
 * Applies USERS_FILE (or seeds the demo users outside production; deletes them in production),
 * retrying while the store is unreachable, until a stop begins.
 */
async function bootstrapUsers(
  config: Config,
  entries: UsersFileEntry[] | undefined,
  store: Store,
  logger: Logger,
  readiness: Readiness,
  categories: readonly string[],
): Promise<void> {
  // Commands fail at once while Redis is not connected: give the first connection its time, so that
  // a normal start does not begin with a "store unreachable" warning.
  await store.connected(storeTimeouts(config.redisTimeoutMs).connectMs);
  for (let attempt = 1; readiness.phase() !== "stopping"; attempt += 1) {
    const refused = store.refusedSetting();
    if (refused !== undefined) fail([refused]);
    try {
      // Not ready while Redis refuses tollgate's scripts to its user: every check would degrade.
      await store.scriptsPermitted();
      // First: USERS_FILE and the demo users look their names up in the canonical form.
      logNameAdoption(await store.adoptCanonicalNames(), logger);
      // A user removed here goes as DELETE /admin/users removes one: with its sessions, API keys,
      // windows (and its keys', in these categories) and its name's lockout.
      const lockout = createLockout({ window: config.loginLockout, limiter: store.limiter });
      const identity = { ...store, categories, lockout };
      if (config.production) await removeDemoUsers(identity, logger);
      if (entries !== undefined) {
        await syncUsersFile(identity, entries, logger);
      } else if (config.production) {
        if (!(await store.users.any()))
          fail(["USERS_FILE: required in production when the store holds no users"]);
      } else {
        await seedDemoUsers(store.users, logger);
      }
      return;
    } catch (error) {
      if (error instanceof UsersFileError) throw error;
      if (attempt === 1)
        logger.warn(
          { event: "store_down", err: storeErrorText(error) },
          "store unreachable at start-up; retrying",
        );
      await new Promise((r) => setTimeout(r, Math.min(5_000, 200 * attempt)));
    }
  }
}

/**
 * OpenTelemetry, when an endpoint is set: the SDK is imported only then, so a tollgate without
 * tracing never loads it.
 */
async function startTracing(config: Config, logger: Logger): Promise<Tracing | undefined> {
  const settings = config.tracing;
  if (settings === undefined) return undefined;
  const { createOtelTracing } = await import("./tracing/otel.js");
  const tracing = await createOtelTracing(settings, logger);
  const { origin, pathname } = new URL(settings.url);
  logger.info(
    {
      event: "tracing",
      url: `${origin}${pathname}`,
      protocol: settings.protocol,
      sampler: settings.sampler,
      ...(settings.sampler.endsWith("traceidratio") ? { ratio: settings.ratio } : {}),
    },
    "tracing on: spans exported over OTLP",
  );
  return tracing;
}

/** A URL a person can paste: a wildcard bind address is reachable as localhost. */
function urlOf(host: string, port: number): string {
  const name = host === "0.0.0.0" || host === "::" ? "localhost" : host.includes(":") ? `[${host}]` : host;
  return `http://${name}:${port}`;
}

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  if (args.includes("--help") || args.includes("-h")) {
    fdWriter(1).write(
      "usage: npm start  (or node dist/src/main.js)\n" +
        "Every setting comes from the environment or .env; docs/settings.md lists them.\n",
    );
    return;
  }
  if (args.length > 0)
    fail([`unknown argument ${JSON.stringify(args[0])}; settings come from the environment (--help)`]);
  loadEnvFile();
  // WORKERS: a worker that replaces a dead one starts on what the others run (the files may hold a refused edit).
  const handed = await startSources<ReloadSources>();
  const { config, policy, rls, sources } = startupSettings(handed);
  const { logger } = await createProcessLogger({
    level: config.logLevel,
    format: config.logFormat,
    isTTY: isatty(1),
  });
  if (handed !== undefined) logHandedOver(logger, policy, rls);
  // Read (and validated) once, before anything listens, so a bad file stops start-up with its own message.
  const entries =
    config.usersFile === undefined
      ? undefined
      : await readUsersFile(config.usersFile, policy).catch((error: unknown) => {
          if (error instanceof UsersFileError) fail(error.message.split("\n"));
          throw error;
        });
  // Once per start: the workers of a WORKERS=N primary read the same environment.
  if (!isWorker()) warnUnknownSettings(config, logger);
  if (config.startedByNpm && !isWorker()) stopWithNpm(logger);
  // Once per start: by the supervisor under WORKERS, not again by each of its workers.
  const exposure = isWorker() ? undefined : metricsExposureWarning(config);
  if (exposure !== undefined) logger.warn({ event: "metrics_unprotected" }, exposure);
  // WORKERS > 1: this process supervises workers, each of which runs the rest of main().
  if (shouldSupervise(config)) {
    return superviseWorkers({
      config,
      logger,
      entry: fileURLToPath(import.meta.url),
      readSources: () => readReloadSources(config),
      inForce: sources,
      watch: [config.policyFile, config.rls?.configPath].filter((path) => path !== undefined),
      onReload: logWorkerReload(logger),
    });
  }
  const tracing = await startTracing(config, logger);
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
  if (config.jwt.secretGenerated && store.kind === "memory") {
    logger.warn(
      { event: "jwt_secret_generated" },
      "JWT_SECRET is unset: a random secret was generated; tokens end with this process",
    );
  }
  // Nothing listens yet while the shared secret is awaited: a stop then needs no drain.
  const quit = () => process.exit(0);
  process.once("SIGTERM", quit).once("SIGINT", quit);
  const settings = await withSharedJwtSecret({ config, store, logger, fail });
  process.off("SIGTERM", quit).off("SIGINT", quit);

  const readiness = createReadiness();
  // Under WORKERS every reload goes through the primary, which hands all workers one reading of the files.
  const everywhere = isWorker() ? askForReloads() : undefined;
  const tollgate = createTollgate({
    config: settings,
    policy,
    store,
    logger,
    readiness,
    watchFiles: everywhere === undefined,
    ...(everywhere === undefined ? {} : { reloadEverywhere: everywhere }),
    ...(rls === undefined ? {} : { rls }),
    tracing,
  });
  // SIGHUP re-reads POLICY_FILE and RLS_CONFIG; in a worker, on every worker, as one to the primary does.
  if (everywhere === undefined) {
    process.on("SIGHUP", () => tollgate.reloadPolicy("signal"));
  } else {
    process.on("SIGHUP", () => void everywhere("signal").catch(() => undefined));
    applyReloads(reloadFromSources(tollgate.reloads, logger));
  }
  const listeners = createListeners(settings, tollgate);
  stopOnSignals({ listeners, store, logger, readiness, drainDelayMs: config.drainDelayMs, tracing });
  await Promise.all(
    listeners.map((listener) =>
      listener.start().catch((error: NodeJS.ErrnoException) => fail([listenProblem(listener, error)])),
    ),
  );
  // Under WORKERS, the supervisor counts this worker as started.
  reportListening(listeners);
  await bootstrapUsers(config, entries, store, logger, readiness, policy.categories).catch(
    (error: unknown) => {
      logger.fatal({ err: (error as Error).message }, "cannot load users");
      process.exit(1);
    },
  );
  // In the background: readiness never waits on a walk through every key, nor on Redis's settings.
  void sweepOrphanKeys({ ...store, categories: policy.categories }, logger);
  void warnEvictingNodes(store, logger);
  const keys = tollgate.providerKeys;
  if (keys !== undefined && !keys.loaded()) {
    // Not ready until provider tokens can be verified: retried with a doubling delay, logged each time.
    logger.info({ event: "provider_keys_wait" }, "waiting for the identity provider's keys before ready");
    await keys.ready();
  }
  if (readiness.phase() === "stopping") return;
  readiness.markReady();
  const urls = Object.fromEntries(listeners.map(({ name, host, port }) => [name, urlOf(host, port)]));
  const where = Object.entries(urls).map(([name, url]) => `${name} ${url}`);
  logger.info(
    {
      event: "ready",
      store: store.kind,
      ...(config.redis === undefined ? {} : { redisTopology: config.redis.topology.kind }),
      failureMode: config.failureMode,
      urls,
    },
    // The pid to signal (kill -HUP reloads): the supervisor's under WORKERS, in workers_started.
    `tollgate ready${isWorker() ? "" : ` (pid ${process.pid})`}: ${where.join(", ")}`,
  );
  if (config.adminTokenGenerated) stderr.write(adminTokenNotice(config.adminToken));
}

main().catch((error: unknown) => {
  fail([`start-up failed: ${(error as Error).message}`]);
});
