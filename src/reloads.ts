// Reloads of the policy and RLS_CONFIG in one process, counted and logged, and the answer of the
// admin call: from this process alone, or (WORKERS) from every worker, as worker-reloads.ts runs them.
import type { Config } from "./config/env.js";
import type { Metrics } from "./metrics/metrics.js";
import { type PolicySource, policyFromSource, readPolicySource } from "./policy/policy.js";
import type { PolicyState, ReloadResult } from "./policy/policy-state.js";
import {
  outcomeOf,
  type ReloadAnswer,
  type ReloadOutcome,
  type ReloadTrigger,
  reloadAnswer,
  type WorkerReload,
} from "./policy/reload-report.js";
import type { Logger } from "./process/logger.js";
import { type RlsSource, readRlsSource } from "./rls/load.js";
import { createRlsState, type RlsReload, type RlsState } from "./rls/state.js";

/** POLICY_FILE and RLS_CONFIG as one reading found them (WORKERS: the primary's, for every worker). */
export type ReloadSources = { policy: PolicySource; rls?: RlsSource; readAt: number };

export function readReloadSources(config: Config): ReloadSources {
  return {
    policy: readPolicySource(config.policyFile),
    ...(config.rls === undefined ? {} : { rls: readRlsSource(config.rls.configPath) }),
    readAt: Date.now(),
  };
}

/**
 * The policy and RLS_CONFIG to start on, from the files or from `handed`: under WORKERS, a worker that
 * replaces one that died gets the texts the others run. Throws PolicyError or RlsConfigError.
 */
export function startupStates(config: Config, handed: ReloadSources | undefined) {
  const sources = handed ?? readReloadSources(config);
  const rls =
    config.rls === undefined
      ? undefined
      : createRlsState({
          path: config.rls.configPath,
          defaultAlgorithm: config.rls.defaultAlgorithm,
          source: sources.rls,
        });
  return { sources, rls, policy: policyFromSource(config.policyFile, sources.policy) };
}

export type Reloads = {
  /** Reloads both from the files, or from `sources` read elsewhere; counted and logged. */
  reload(
    trigger: ReloadTrigger,
    sources?: ReloadSources,
  ): { policy: ReloadResult; rls: RlsReload | undefined };
  /** Reloads on a change of either file, until the policy and RLS states are closed (one process alone). */
  watch(): void;
};

export function createReloads(options: {
  policy: PolicyState;
  rls: RlsState | undefined;
  metrics: Metrics;
  logger: Logger;
  /** Announces that limits may have grown (a changed RLS configuration). */
  onRlsChange: () => void;
}): Reloads {
  const { policy, rls, metrics, logger } = options;

  /** Counts and logs an RLS_CONFIG reload; one the file watch found unchanged says nothing. */
  const reportRls = (trigger: ReloadTrigger, result: RlsReload) => {
    if (!result.ok) {
      metrics.rlsReloads.inc({ result: "invalid" });
      logger.error(
        { event: "rls_config_invalid", trigger, problems: result.problems, version: result.config.version },
        "RLS_CONFIG reload refused: the configuration in force stays",
      );
      return;
    }
    if (!result.changed && trigger === "file") return;
    metrics.rlsReloads.inc({ result: result.changed ? "changed" : "unchanged" });
    // Limits may have grown: no refusal of the old configuration stands, here or elsewhere.
    if (result.changed) options.onRlsChange();
    logger.info(
      { event: "rls_config_reloaded", trigger, version: result.config.version, changed: result.changed },
      result.changed ? "RLS_CONFIG reloaded" : "RLS_CONFIG reloaded: unchanged",
    );
  };

  /** Counts and logs a policy reload; one the file watch found unchanged says nothing. */
  const reportPolicy = (trigger: ReloadTrigger, result: ReloadResult) => {
    const { version, source } = result.active;
    if (!result.ok) {
      metrics.policyReloads.inc({ result: "invalid" });
      logger.error(
        { event: "policy_invalid", trigger, source, problems: result.problems, version },
        "policy reload refused: the policy in force stays",
      );
      return;
    }
    if (!result.changed && trigger === "file") return;
    metrics.policyReloads.inc({ result: result.changed ? "changed" : "unchanged" });
    logger.info(
      { event: "policy_reloaded", trigger, source, version, changed: result.changed },
      result.changed ? "policy reloaded" : "policy reloaded: unchanged",
    );
  };

  return {
    reload(trigger, sources) {
      const rlsResult =
        rls === undefined ? undefined : rls.reload(sources === undefined ? undefined : sources.rls);
      if (rlsResult !== undefined) reportRls(trigger, rlsResult);
      const result = policy.reload(
        sources === undefined ? undefined : { source: sources.policy, readAt: sources.readAt },
      );
      reportPolicy(trigger, result);
      return { policy: result, rls: rlsResult };
    },
    watch() {
      rls?.watch((result) => reportRls("file", result));
      policy.watch((result) => reportPolicy("file", result));
    },
  };
}

/** The outcome of a reload that a worker applies from the primary's sources, logged when it fails. */
export function reloadFromSources(reloads: Reloads, logger: Logger) {
  return (trigger: ReloadTrigger, sources: unknown): ReloadOutcome => {
    try {
      const { policy, rls } = reloads.reload(trigger, sources as ReloadSources);
      return outcomeOf(policy, rls);
    } catch (error) {
      logger.error({ event: "reload_failed", trigger, err: (error as Error).message }, "reload failed");
      throw error;
    }
  };
}

/**
 * POST /admin/policy/reload: this process's reload, or with `everywhere` (WORKERS) every worker's,
 * answered once each confirmed or the wait ended.
 */
export function adminReload(
  reloads: Reloads,
  everywhere: ((trigger: "admin") => Promise<WorkerReload[]>) | undefined,
): () => Promise<ReloadAnswer> {
  if (everywhere === undefined) {
    return async () => {
      const { policy, rls } = reloads.reload("admin");
      return reloadAnswer([{ pid: process.pid, outcome: outcomeOf(policy, rls) }], { workers: false });
    };
  }
  return async () => {
    try {
      return reloadAnswer(await everywhere("admin"), { workers: true });
    } catch (error) {
      return {
        kind: "incomplete",
        message: `The reload was not confirmed: ${(error as Error).message}`,
        workers: [],
      };
    }
  };
}

/** In the primary: a reload that not every worker confirmed, or that left them apart, is logged. */
export function logWorkerReload(logger: Logger) {
  return (trigger: ReloadTrigger, parts: WorkerReload[]): void => {
    const answer = reloadAnswer(parts, { workers: true });
    if (answer.kind !== "incomplete") return;
    logger.warn({ event: "reload_incomplete", trigger, workers: answer.workers }, answer.message);
  };
}
