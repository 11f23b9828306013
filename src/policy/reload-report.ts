// What a reload did in each process (one alone, or every WORKERS worker), and the one answer that
// follows: reloaded (the same version in force everywhere), invalid (refused everywhere, the same
// version stays everywhere), or incomplete (a worker did not confirm, or the workers differ).
import type { RlsReload } from "../rls/state.js";
import type { ReloadResult } from "./policy-state.js";

/** What asked for a reload: the admin call, a worker following one, SIGHUP, or a change of the files. */
export type ReloadTrigger = "admin" | "worker" | "signal" | "file";

/** One process's reload of one configuration (the policy, or RLS_CONFIG). */
export type VersionReport = {
  result: "changed" | "unchanged" | "invalid";
  version: string;
  problems?: string[];
};

/** One process's reload, as plain JSON: under WORKERS it travels from the worker to the primary and back. */
export type ReloadOutcome = { policy: VersionReport & { source: string }; rls?: VersionReport };

/** Why a worker did not confirm: no answer in time, no worker listening in its place, or its reload failed. */
export type Unconfirmed = "timeout" | "restarting" | "failed";

/** One worker's part: its outcome, or why there is none. `pid` is null for a worker not yet forked. */
export type WorkerReload =
  | { pid: number | null; outcome: ReloadOutcome }
  | { pid: number | null; unconfirmed: Unconfirmed };

export type WorkerLine = {
  pid: number | null;
  result: VersionReport["result"] | Unconfirmed;
  version?: string;
  rls?: Omit<VersionReport, "problems">;
};

export type ReloadAnswer =
  | {
      kind: "reloaded";
      changed: boolean;
      version: string;
      source: string;
      rls?: VersionReport;
      workers?: WorkerLine[];
    }
  | { kind: "invalid"; problems: string[]; version: string; rls?: VersionReport; workers?: WorkerLine[] }
  | { kind: "incomplete"; message: string; problems?: string[]; workers: WorkerLine[] };

const report = (result: ReloadResult | RlsReload, version: string): VersionReport =>
  result.ok
    ? { result: result.changed ? "changed" : "unchanged", version }
    : { result: "invalid", version, problems: result.problems };

export function outcomeOf(policy: ReloadResult, rls: RlsReload | undefined): ReloadOutcome {
  return {
    policy: { ...report(policy, policy.active.version), source: policy.active.source },
    ...(rls === undefined ? {} : { rls: report(rls, rls.config.version) }),
  };
}

const line = (worker: WorkerReload): WorkerLine => {
  if ("unconfirmed" in worker) return { pid: worker.pid, result: worker.unconfirmed };
  const { policy, rls } = worker.outcome;
  return {
    pid: worker.pid,
    result: policy.result,
    version: policy.version,
    ...(rls === undefined ? {} : { rls: { result: rls.result, version: rls.version } }),
  };
};

const distinct = (values: readonly string[]): string[] => [...new Set(values)];

/** Every version and result of one configuration over the workers, summed up in one report. */
function combine(reports: readonly VersionReport[]): VersionReport | string {
  const versions = distinct(reports.map((r) => r.version));
  if (versions.length > 1) return `the workers hold different versions (${versions.join(", ")})`;
  const invalid = reports.filter((r) => r.result === "invalid");
  if (invalid.length > 0 && invalid.length < reports.length)
    return "some workers refused it and others took it";
  const first = reports[0] as VersionReport;
  if (first.result !== "invalid" && reports.some((r) => r.result === "changed"))
    return { result: "changed", version: first.version };
  return first;
}

/**
 * The answer of a reload from each worker's part (`workers` says whether to list them: a lone
 * process answers as it always has). Only when every worker confirmed and they all hold one version
 * of each configuration is the answer anything but incomplete.
 */
export function reloadAnswer(parts: readonly WorkerReload[], options: { workers: boolean }): ReloadAnswer {
  const lines = parts.map(line);
  const listed = options.workers ? { workers: lines } : {};
  const outcomes = parts.flatMap((p) => ("outcome" in p ? [p.outcome] : []));
  const policies = outcomes.map((o) => o.policy);
  const problems = policies.find((p) => p.problems !== undefined)?.problems;
  const withProblems = problems === undefined ? {} : { problems };
  const missing = lines.filter(
    (l) => l.result === "timeout" || l.result === "restarting" || l.result === "failed",
  );
  if (missing.length > 0 || outcomes.length === 0) {
    const which = missing.map((l) => `${l.pid === null ? "a worker" : `pid ${l.pid}`} (${l.result})`);
    return {
      kind: "incomplete",
      message: `The reload was not confirmed by ${missing.length} of ${lines.length} workers: ${which.join(", ")}`,
      ...withProblems,
      workers: lines,
    };
  }
  const policy = combine(policies);
  const rlsReports = outcomes.flatMap((o) => (o.rls === undefined ? [] : [o.rls]));
  const rls = rlsReports.length === 0 ? undefined : combine(rlsReports);
  if (typeof policy === "string" || typeof rls === "string") {
    const split = [
      ...(typeof policy === "string" ? [`the policy: ${policy}`] : []),
      ...(typeof rls === "string" ? [`RLS_CONFIG: ${rls}`] : []),
    ];
    const message = `The workers disagree after the reload: ${split.join("; ")}`;
    return { kind: "incomplete", message, ...withProblems, workers: lines };
  }
  const withRls = rls === undefined ? {} : { rls };
  if (policy.result === "invalid")
    return {
      kind: "invalid",
      problems: policy.problems ?? [],
      version: policy.version,
      ...withRls,
      ...listed,
    };
  return {
    kind: "reloaded",
    changed: policy.result === "changed",
    version: policy.version,
    source: (policies[0] as ReloadOutcome["policy"]).source,
    ...withRls,
    ...listed,
  };
}
