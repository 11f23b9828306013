// WORKERS: one reload for every worker, from one reading of the files, confirmed before it answers.
// The primary reads POLICY_FILE and RLS_CONFIG once per reload (the admin call through any worker,
// SIGHUP, a change of the files) and sends every worker the same texts, so that a file changed
// between two reads never leaves two workers on two versions; the reloads reach each worker in
// the order the primary sent them, so each ends on the same last one. A worker that starts during a
// reload, or after one whose wait it missed, gets it once it listens. The answer waits for every
// worker, at most RELOAD_WAIT_MS. A worker restarted after a death starts on the texts the workers
// last took, not on the files: those may hold an edit that every worker refused.
import cluster, { type Worker } from "node:cluster";
import type { Policy } from "../policy/policy.js";
import { policyVersion } from "../policy/policy-state.js";
import type { ReloadOutcome, ReloadTrigger, WorkerReload } from "../policy/reload-report.js";
import type { RlsState } from "../rls/state.js";
import type { Logger } from "./logger.js";
import { primaryCalls } from "./primary-calls.js";

/** How long a reload waits for every worker's confirmation: a reload takes milliseconds, a restarting worker a second or two. */
export const RELOAD_WAIT_MS = 5_000;
/** How long a worker waits for the primary's answer: longer than the primary waits for the workers. */
const ANSWER_WAIT_MS = RELOAD_WAIT_MS + 2_000;

const APPLY = "tollgate:reload-apply";
const APPLIED = "tollgate:reload-applied";
const REQUEST = "tollgate:reload-request";
const DONE = "tollgate:reload-done";
const START = "tollgate:start-sources";

type Apply = { type: typeof APPLY; round: number; trigger: ReloadTrigger; sources: unknown };
/** No outcome: the worker's reload failed (it logged why). */
type Applied = { type: typeof APPLIED; round: number; outcome?: ReloadOutcome };
type Request = { type: typeof REQUEST; id: number; trigger: "admin" | "signal" };
type Done = { type: typeof DONE; id: number; parts: WorkerReload[] };
/** A worker's question before it reads anything, and the answer: texts for a restarted worker only. */
type Start = { type: typeof START; sources?: Sources };

/** One reading of the files as this module needs to know it (reloads.ts has the whole type). */
export type Sources = { policy: unknown; rls?: unknown; readAt: number };

const typeOf = (message: unknown): unknown =>
  typeof message === "object" && message !== null ? (message as { type?: unknown }).type : undefined;

/** What the primary knows of a worker slot: its worker, whether it listens yet, and whether it replaced one that died. */
export type ReloadSlot = {
  readonly worker: Worker | undefined;
  readonly listening: boolean;
  readonly restarted: boolean;
};

type Round = {
  trigger: "signal" | "file" | "admin";
  requester: Worker | undefined;
  sources: Sources;
  sent: Set<Worker>;
  parts: (WorkerReload | undefined)[];
  finish(): void;
};

export type ReloadRounds = {
  /** One reload on every worker (`requester`: the worker whose admin port was called). */
  run(trigger: "signal" | "file" | "admin", requester?: Worker): Promise<WorkerReload[]>;
  /** A worker listens from now on: it gets every reload still waiting for its slot. */
  listening(worker: Worker): void;
  /** Handles a worker's reload message; false for any other message. */
  message(worker: Worker, message: unknown): boolean;
};

/** In the primary: runs the reloads over the worker slots (the supervisor's own array, read live). */
export function createReloadRounds(options: {
  slots: readonly ReloadSlot[];
  readSources: () => Sources;
  /** The texts the primary read as it started, which the first workers run too. */
  inForce: Sources;
  /** Called once a reload has every worker's part, or has waited RELOAD_WAIT_MS. */
  onRound: (trigger: ReloadTrigger, parts: WorkerReload[]) => void;
  waitMs?: number;
}): ReloadRounds {
  const { slots } = options;
  const rounds = new Map<number, Round>();
  /** The newest reload, kept once it has answered: a worker that listens only later must end on it too. */
  let latest: { id: number; round: Round } | undefined;
  let nextRound = 0;
  /** The texts a restarted worker starts on: of each file, the newest reading that a worker took. */
  let inForce = options.inForce;
  const tookRound = { policy: -1, rls: -1 };
  const took = (id: number, sources: Sources, outcome: ReloadOutcome): void => {
    if (outcome.policy.result !== "invalid" && id > tookRound.policy) {
      tookRound.policy = id;
      inForce = { ...inForce, policy: sources.policy, readAt: sources.readAt };
    }
    if (outcome.rls !== undefined && outcome.rls.result !== "invalid" && id > tookRound.rls) {
      tookRound.rls = id;
      inForce = { ...inForce, rls: sources.rls };
    }
  };
  const pidOf = (worker: Worker | undefined): number | null => worker?.process.pid ?? null;

  const send = (id: number, round: Round, worker: Worker): void => {
    if (!worker.isConnected()) return;
    const trigger = round.trigger === "admin" && worker !== round.requester ? "worker" : round.trigger;
    worker.send({ type: APPLY, round: id, trigger, sources: round.sources } satisfies Apply);
    round.sent.add(worker);
  };

  const run: ReloadRounds["run"] = (trigger, requester) =>
    new Promise((resolve) => {
      const id = nextRound++;
      const timer = setTimeout(() => round.finish(), options.waitMs ?? RELOAD_WAIT_MS);
      const round: Round = {
        trigger,
        requester,
        sources: options.readSources(),
        sent: new Set(),
        parts: slots.map(() => undefined),
        finish() {
          clearTimeout(timer);
          rounds.delete(id);
          const parts = round.parts.map((part, i): WorkerReload => {
            if (part !== undefined) return part;
            const { worker, listening } = slots[i] as ReloadSlot;
            const asked = worker !== undefined && listening && round.sent.has(worker);
            return { pid: pidOf(worker), unconfirmed: asked ? "timeout" : "restarting" };
          });
          options.onRound(trigger, parts);
          resolve(parts);
        },
      };
      rounds.set(id, round);
      latest = { id, round };
      for (const { worker, listening } of slots)
        if (worker !== undefined && listening) send(id, round, worker);
    });

  const applied = (worker: Worker, message: Applied): void => {
    // The newest reload counts even once answered: a worker that listened late took it then.
    const known = rounds.get(message.round) ?? (latest?.id === message.round ? latest.round : undefined);
    if (known !== undefined && message.outcome !== undefined)
      took(message.round, known.sources, message.outcome);
    const round = rounds.get(message.round);
    const slot = slots.findIndex((s) => s.worker === worker);
    if (round === undefined || slot < 0) return;
    const pid = pidOf(worker);
    round.parts[slot] =
      message.outcome === undefined ? { pid, unconfirmed: "failed" } : { pid, outcome: message.outcome };
    if (round.parts.every((p) => p !== undefined)) round.finish();
  };

  return {
    run,
    listening(worker) {
      const slot = slots.findIndex((s) => s.worker === worker);
      if (slot < 0) return;
      // In the order they were started: the worker ends on the last, as the others do.
      for (const [id, round] of rounds) {
        if (round.parts[slot] === undefined && !round.sent.has(worker)) send(id, round, worker);
      }
      // It read the files as it started, maybe before that reload read them (a restart that took longer
      // than the reload waited): the reload's reading, once more, keeps it on the others' version.
      if (latest !== undefined && !latest.round.sent.has(worker)) send(latest.id, latest.round, worker);
    },
    message(worker, message) {
      const type = typeOf(message);
      if (type === START) {
        const restarted = slots.find((s) => s.worker === worker)?.restarted === true;
        if (worker.isConnected())
          worker.send({ type: START, ...(restarted ? { sources: inForce } : {}) } satisfies Start);
        return true;
      }
      if (type === APPLIED) {
        applied(worker, message as Applied);
        return true;
      }
      if (type !== REQUEST) return false;
      const { id, trigger } = message as Request;
      void run(trigger === "signal" ? "signal" : "admin", worker).then((parts) => {
        if (worker.isConnected()) worker.send({ type: DONE, id, parts } satisfies Done);
      });
      return true;
    },
  };
}

/**
 * In a worker, before it reads the files: the texts to start on, from the primary. A restarted worker
 * gets those the other workers run; a first start gets none and reads the files, as does a worker
 * whose primary did not answer in time, and a process alone.
 */
export function startSources<T extends Sources>(): Promise<T | undefined> {
  if (!cluster.isWorker) return Promise.resolve(undefined);
  return new Promise((resolve) => {
    const answer = (message: unknown): void => {
      if (typeOf(message) === START) done((message as Start).sources as T | undefined);
    };
    const timer = setTimeout(() => done(undefined), ANSWER_WAIT_MS);
    const done = (sources: T | undefined): void => {
      clearTimeout(timer);
      process.off("message", answer);
      resolve(sources);
    };
    process.on("message", answer);
    process.send?.({ type: START } satisfies Start);
  });
}

/** In a restarted worker: says that it started on the versions the primary handed it, not on the files. */
export function logHandedOver(logger: Logger, policy: Policy, rls: RlsState | undefined): void {
  logger.info(
    {
      event: "worker_started_in_force",
      version: policyVersion(policy),
      ...(rls === undefined ? {} : { rlsVersion: rls.current().version }),
    },
    "restarted worker: on the policy and RLS_CONFIG the other workers run, not on the files as they are now",
  );
}

/**
 * In a worker: asks the primary for a reload on every worker (the admin call, or SIGHUP sent to this
 * worker) and resolves with each worker's part once all confirmed or the wait ended.
 */
export function askForReloads(): (trigger: "admin" | "signal") => Promise<WorkerReload[]> {
  const isDone = (message: unknown): message is Done => typeOf(message) === DONE;
  const ask = primaryCalls(isDone, ANSWER_WAIT_MS, "no answer from the supervisor in time");
  return async (trigger) => (await ask((id) => ({ type: REQUEST, id, trigger }) satisfies Request)).parts;
}

/**
 * In a worker: applies every reload the primary sends and confirms it. `apply` reloads from the
 * texts the primary read and returns the outcome; a throw counts as a failed reload.
 */
export function applyReloads(apply: (trigger: ReloadTrigger, sources: unknown) => ReloadOutcome): void {
  process.on("message", (message: unknown) => {
    if (typeOf(message) !== APPLY) return;
    const { round, trigger, sources } = message as Apply;
    let outcome: ReloadOutcome | undefined;
    try {
      outcome = apply(trigger, sources);
    } catch {
      outcome = undefined;
    }
    process.send?.({ type: APPLIED, round, ...(outcome === undefined ? {} : { outcome }) } satisfies Applied);
  });
}
