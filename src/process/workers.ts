// WORKERS=N: one primary process that runs N tollgate workers on the same ports (node:cluster).
// Each worker is a whole tollgate with its own Redis connection; the primary only supervises: it
// restarts a worker that dies (with a backoff, so a crash loop does not spin), on SIGTERM or SIGINT
// it lets every worker drain and exits 0 once all are gone, and it runs every reload of the policy
// and RLS_CONFIG (SIGHUP, a change of the files, the admin call through any worker) on all the
// workers at once (worker-reloads.ts).
import cluster, { type Worker } from "node:cluster";
import { AggregatorRegistry, type Registry } from "prom-client";
import type { Config } from "../config/env.js";
import { watchPath } from "../config/file-watch.js";
import type { ListenerAddress } from "../frontends/listener.js";
import type { ReloadTrigger, WorkerReload } from "../policy/reload-report.js";
import { adminTokenNotice, fdWriter, type Logger } from "./logger.js";
import { primaryCalls } from "./primary-calls.js";
import { createReloadRounds, type Sources } from "./worker-reloads.js";

/** A worker asks the primary for the whole cluster's metrics text with this IPC message type. */
const METRICS_MESSAGE = "tollgate:metrics";
/** Longer than prom-client's own 5 s wait for every worker's figures. */
const METRICS_WAIT_MS = 6_000;

type MetricsMessage = { type: typeof METRICS_MESSAGE; id: number; text?: string; error?: string };
const isMetricsMessage = (message: unknown): message is MetricsMessage =>
  typeof message === "object" && message !== null && (message as MetricsMessage).type === METRICS_MESSAGE;

/**
 * The text GET /metrics serves. A lone process serves its own registry. A worker serves the sum
 * over all workers (prom-client's cluster aggregation, collected by the primary), so that a scrape
 * that lands on any one worker still counts every check.
 */
export function metricsText(registry: Registry): () => Promise<string> {
  if (!cluster.isWorker) return () => registry.metrics();
  // Constructing it installs this worker's answer to the primary's requests for its figures.
  new AggregatorRegistry();
  AggregatorRegistry.setRegistries([registry]);
  const ask = primaryCalls(isMetricsMessage, METRICS_WAIT_MS, "no metrics from the primary in time");
  return async () => {
    const reply = await ask((id) => ({ type: METRICS_MESSAGE, id }) satisfies MetricsMessage);
    if (reply.text !== undefined) return reply.text;
    throw new Error(`cluster metrics: ${reply.error ?? "no answer"}`);
  };
}

/** A worker tells the primary that every one of its listeners listens, and where. */
const LISTENING_MESSAGE = "tollgate:listening";
type Where = Pick<ListenerAddress, "name" | "host" | "port">;
type ListeningMessage = { type: typeof LISTENING_MESSAGE; listeners: Where[] };
const isListeningMessage = (message: unknown): message is ListeningMessage =>
  typeof message === "object" && message !== null && (message as ListeningMessage).type === LISTENING_MESSAGE;

/** In a worker: tells the supervisor that this worker listens on all its listeners' ports. */
export function reportListening(listeners: readonly Where[]): void {
  if (!cluster.isWorker) return;
  const where = listeners.map(({ name, host, port }) => ({ name, host, port }));
  process.send?.({ type: LISTENING_MESSAGE, listeners: where } satisfies ListeningMessage);
}

/** Restart delays: doubled per death in a row of one worker slot, from the first to the last. */
export const RESTART_FIRST_MS = 250;
export const RESTART_MAX_MS = 10_000;
/** A worker that ran this long before it died starts its slot's backoff over. */
const STABLE_MS = 30_000;
/** How long the primary waits for draining workers beyond DRAIN_DELAY_MS: each forces its own exit after 10 s. */
const STOP_GRACE_MS = 15_000;

/** The wait before restarting a worker slot whose worker died `deathsInARow` times in a row (0: first). */
export function restartDelayMs(deathsInARow: number): number {
  return Math.min(RESTART_MAX_MS, RESTART_FIRST_MS * 2 ** deathsInARow);
}

/** True in a worker that a supervisor started (it shares the supervisor's settings and start-up warnings). */
export const isWorker = (): boolean => cluster.isWorker;

/** True in the process that should supervise workers instead of serving requests itself. */
export function shouldSupervise(config: Config): boolean {
  return config.workers > 1 && cluster.isPrimary;
}

type Slot = {
  worker: Worker | undefined;
  /** Whether the worker listens on all its ports yet (it then takes reloads). */
  listening: boolean;
  /** Whether the worker replaced one that died: it starts on the texts in force, not on the files. */
  restarted: boolean;
  startedAt: number;
  deathsInARow: number;
  timer?: NodeJS.Timeout;
};

/**
 * Runs the primary: forks `config.workers` workers and supervises them until SIGTERM/SIGINT.
 * An ADMIN_TOKEN generated for this start (unset outside production) is made once here and handed
 * to every worker. A generated JWT secret is not: workers need Redis, where they all find the same.
 */
export function superviseWorkers(options: {
  config: Config;
  logger: Logger;
  entry: string;
  /** Reads POLICY_FILE and RLS_CONFIG once for a reload that every worker then applies. */
  readSources: () => Sources;
  /** The texts of POLICY_FILE and RLS_CONFIG that the primary started on: a worker restarted before any reload starts on them. */
  inForce: Sources;
  /** The files to watch (POLICY_FILE, RLS_CONFIG): a change reloads every worker. */
  watch: readonly string[];
  /** Each reload's parts, once complete or timed out (logged when a worker did not confirm). */
  onReload: (trigger: ReloadTrigger, parts: WorkerReload[]) => void;
}): void {
  const { config, logger } = options;
  const env: Record<string, string> = {};
  if (config.adminTokenGenerated) {
    env.ADMIN_TOKEN = config.adminToken;
    fdWriter(2).write(adminTokenNotice(config.adminToken));
  }

  const slots: Slot[] = Array.from({ length: config.workers }, () => ({
    worker: undefined,
    listening: false,
    restarted: false,
    startedAt: 0,
    deathsInARow: 0,
  }));
  /** Whether a worker has listened on all its ports yet: before that, a death stops everything. */
  let up = false;
  let stopping = false;
  let exitCode = 0;

  // Workers run the compiled entry point itself, not whatever script started the primary (npm start's
  // build check, for one), so they start as fast as the primary's own start-up allows. The entry
  // names itself: this file's own location differs between tsc's output and the bundled main.js.
  cluster.setupPrimary({ exec: options.entry });
  const aggregator = new AggregatorRegistry();
  const reloads = createReloadRounds({
    slots,
    readSources: options.readSources,
    inForce: options.inForce,
    onRound: options.onReload,
  });
  /** The first worker to listen on all its ports: the workers are up. */
  const started = (listeners: Where[]): void => {
    if (up) return;
    up = true;
    logger.info(
      {
        event: "workers_started",
        workers: config.workers,
        ports: listeners.map(({ port }) => port),
        hosts: Object.fromEntries(listeners.map(({ name, host }) => [name, host])),
      },
      `tollgate workers share the ports (supervisor pid ${process.pid}: kill -HUP ${process.pid} reloads every worker)`,
    );
  };

  cluster.on("message", (worker, message: unknown) => {
    if (reloads.message(worker, message)) return;
    if (isListeningMessage(message)) {
      const slot = slots.find((s) => s.worker === worker);
      if (slot !== undefined) slot.listening = true;
      started(message.listeners);
      reloads.listening(worker);
      return;
    }
    if (!isMetricsMessage(message)) return;
    const reply = (fields: Partial<MetricsMessage>) => {
      if (worker.isConnected()) worker.send({ type: METRICS_MESSAGE, id: message.id, ...fields });
    };
    aggregator.clusterMetrics().then(
      (text) => reply({ text }),
      (error: unknown) => reply({ error: (error as Error).message }),
    );
  });

  const start = (slot: Slot, restarted: boolean): void => {
    slot.timer = undefined;
    slot.listening = false;
    slot.restarted = restarted;
    slot.startedAt = Date.now();
    slot.worker = cluster.fork(env);
  };

  cluster.on("exit", (worker, code, signal) => {
    const slot = slots.find((s) => s.worker === worker);
    if (slot === undefined) return;
    slot.worker = undefined;
    slot.listening = false;
    if (stopping) {
      if (slots.every((s) => s.worker === undefined)) {
        logger.info({ event: "stopped" }, "all workers stopped");
        process.exit(exitCode);
      }
      return;
    }
    if (!up) {
      // No worker ever served (a port in use, say): restarting would only repeat the failure.
      logger.fatal({ event: "worker_start_failed", code, signal }, "a worker failed to start; stopping");
      exitCode = 1;
      stop("worker_start_failed");
      return;
    }
    if (Date.now() - slot.startedAt >= STABLE_MS) slot.deathsInARow = 0;
    const delayMs = restartDelayMs(slot.deathsInARow);
    slot.deathsInARow += 1;
    logger.error(
      { event: "worker_died", workerPid: worker.process.pid, code, signal, restartInMs: delayMs },
      "a worker died; starting another",
    );
    slot.timer = setTimeout(() => start(slot, true), delayMs);
  });

  const stop = (signal: string): void => {
    if (stopping) return;
    stopping = true;
    logger.info({ event: "stopping", signal, workers: config.workers }, "draining every worker");
    for (const slot of slots) {
      if (slot.timer !== undefined) clearTimeout(slot.timer);
      slot.timer = undefined;
      // Each worker drains on SIGTERM exactly as a single tollgate does.
      slot.worker?.process.kill("SIGTERM");
    }
    if (slots.every((s) => s.worker === undefined)) process.exit(exitCode);
    setTimeout(() => {
      logger.warn({ event: "stop_forced" }, "workers still running after the grace period; killing them");
      for (const slot of slots) slot.worker?.process.kill("SIGKILL");
      process.exit(exitCode);
    }, config.drainDelayMs + STOP_GRACE_MS).unref();
  };
  process.on("SIGTERM", () => stop("SIGTERM"));
  process.on("SIGINT", () => stop("SIGINT"));
  process.on("SIGHUP", () => {
    logger.info(
      { event: "policy_reload_requested", workers: config.workers },
      "SIGHUP: every worker reloads its policy",
    );
    void reloads.run("signal");
  });
  // Watched here, not by each worker: one reading of a change for all of them.
  for (const path of options.watch) watchPath(path, () => void reloads.run("file"));

  for (const slot of slots) start(slot, false);
}
