// The reload of every WORKERS worker: one reading of the files for all of them, each worker's part,
// and the one answer those parts make. The primary's side runs here over stand-in workers that
// record what the primary sends them (the IPC itself: test/e2e/workers-reload.test.ts).
import type { Worker } from "node:cluster";
import { describe, expect, it } from "vitest";
import {
  type ReloadOutcome,
  type ReloadTrigger,
  reloadAnswer,
  type WorkerReload,
} from "../../src/policy/reload-report.js";
import { createReloadRounds } from "../../src/process/worker-reloads.js";

type Sent = { type: string; round: number; trigger: ReloadTrigger; sources: unknown };

function standIn(pid: number) {
  const sent: Sent[] = [];
  const worker = {
    process: { pid },
    isConnected: () => true,
    send: (message: Sent) => {
      sent.push(message);
      return true;
    },
  } as unknown as Worker;
  return { worker, sent };
}

const took = (version: string, result: "changed" | "unchanged" = "changed"): ReloadOutcome => ({
  policy: { result, version, source: "POLICY_FILE p.yaml" },
});
/** One reading of the files, told apart by `n`. */
const reading = (n: number) => ({ policy: `policy ${n}`, rls: `rls ${n}`, readAt: n });
const applied = (round: number, outcome?: ReloadOutcome) => ({
  type: "tollgate:reload-applied",
  round,
  ...(outcome === undefined ? {} : { outcome }),
});

describe("the primary's reloads", () => {
  it("reads the files once per reload, gives every worker that reading, and answers once all confirmed", async () => {
    const a = standIn(11);
    const b = standIn(12);
    const slots = [
      { worker: a.worker, listening: true, restarted: false },
      { worker: b.worker, listening: true, restarted: false },
    ];
    let reads = 0;
    const rounds = createReloadRounds({
      slots,
      readSources: () => reading(++reads),
      inForce: reading(0),
      onRound: () => undefined,
    });
    const answered = rounds.run("admin", a.worker);
    expect(reads).toBe(1);
    expect(a.sent).toEqual([
      { type: "tollgate:reload-apply", round: 0, trigger: "admin", sources: reading(1) },
    ]);
    // The other worker follows the admin call: same reading, its own trigger.
    expect(b.sent).toEqual([
      { type: "tollgate:reload-apply", round: 0, trigger: "worker", sources: reading(1) },
    ]);
    rounds.message(a.worker, applied(0, took("v2")));
    let done = false;
    void answered.then(() => {
      done = true;
    });
    await Promise.resolve();
    expect(done).toBe(false);
    rounds.message(b.worker, applied(0, took("v2")));
    expect(await answered).toEqual([
      { pid: 11, outcome: took("v2") },
      { pid: 12, outcome: took("v2") },
    ]);
  });

  it("answers with the workers that did not confirm in time: timeout, restarting, failed", async () => {
    const a = standIn(21);
    const b = standIn(22);
    const c = standIn(23);
    const slots = [
      { worker: a.worker, listening: true, restarted: false },
      { worker: b.worker, listening: true, restarted: false },
      { worker: c.worker, listening: true, restarted: false },
      { worker: undefined, listening: false, restarted: true },
    ];
    const logged: WorkerReload[][] = [];
    const rounds = createReloadRounds({
      slots,
      readSources: () => reading(1),
      inForce: reading(0),
      onRound: (_trigger, parts) => logged.push(parts),
      waitMs: 50,
    });
    const answered = rounds.run("signal");
    rounds.message(a.worker, applied(0, took("v2")));
    rounds.message(c.worker, applied(0));
    const parts = await answered;
    expect(parts).toEqual([
      { pid: 21, outcome: took("v2") },
      { pid: 22, unconfirmed: "timeout" },
      { pid: 23, unconfirmed: "failed" },
      { pid: null, unconfirmed: "restarting" },
    ]);
    expect(logged).toEqual([parts]);
  });

  it("gives a worker that listens only later every reload it missed, in order, then the latest once more after it answered", async () => {
    const a = standIn(31);
    const late = standIn(32);
    const slots: { worker: Worker | undefined; listening: boolean; restarted: boolean }[] = [
      { worker: a.worker, listening: true, restarted: false },
      { worker: late.worker, listening: false, restarted: false },
    ];
    let reads = 0;
    const rounds = createReloadRounds({
      slots,
      readSources: () => reading(++reads),
      inForce: reading(0),
      onRound: () => undefined,
      waitMs: 1_000,
    });
    const first = rounds.run("file");
    const second = rounds.run("file");
    expect(late.sent).toEqual([]);
    (slots[1] as { listening: boolean }).listening = true;
    rounds.listening(late.worker);
    expect(late.sent.map((m) => [m.round, m.sources])).toEqual([
      [0, reading(1)],
      [1, reading(2)],
    ]);
    for (const round of [0, 1]) {
      rounds.message(a.worker, applied(round, took(`v${round}`)));
      rounds.message(late.worker, applied(round, took(`v${round}`)));
    }
    await Promise.all([first, second]);
    // A replacement that starts after the reload answered: it read the files as it started, maybe
    // before that reload read them, so it gets that reading as well.
    const replacement = standIn(33);
    slots[1] = { worker: replacement.worker, listening: true, restarted: true };
    rounds.listening(replacement.worker);
    expect(replacement.sent.map((m) => [m.round, m.sources])).toEqual([[1, reading(2)]]);
  });

  it("hands a restarted worker, of each file, the last reading a worker took, and a first start nothing", async () => {
    const a = standIn(41);
    const replacement = standIn(42);
    const slots = [
      { worker: a.worker, listening: true, restarted: false },
      { worker: replacement.worker, listening: false, restarted: true },
    ];
    let reads = 0;
    const rounds = createReloadRounds({
      slots,
      readSources: () => reading(++reads),
      inForce: reading(0),
      onRound: () => undefined,
      waitMs: 50,
    });
    const start = { type: "tollgate:start-sources" };
    // Before any reload: the primary's own reading at start-up.
    rounds.message(replacement.worker, start);
    expect(replacement.sent.pop()).toEqual({ ...start, sources: reading(0) });
    // The policy of the first reload taken, its RLS_CONFIG refused; then a policy refused.
    const first = rounds.run("file");
    rounds.message(a.worker, applied(0, { ...took("v1"), rls: { result: "invalid", version: "r0" } }));
    await first;
    const second = rounds.run("file");
    rounds.message(a.worker, applied(1, { policy: { result: "invalid", version: "v1", source: "p" } }));
    await second;
    rounds.message(a.worker, start);
    expect(a.sent.pop()).toEqual(start);
    rounds.message(replacement.worker, start);
    expect(replacement.sent.pop()).toEqual({
      ...start,
      sources: { ...reading(0), policy: "policy 1", readAt: 1 },
    });
  });
});

describe("the answer of a reload", () => {
  const rls = { result: "changed" as const, version: "r2" };

  it("is the lone process's own, without a list of workers", () => {
    expect(reloadAnswer([{ pid: 1, outcome: { ...took("v2"), rls } }], { workers: false })).toEqual({
      kind: "reloaded",
      changed: true,
      version: "v2",
      source: "POLICY_FILE p.yaml",
      rls,
    });
  });

  it("is reloaded when every worker holds the new version, changed when any of them changed", () => {
    const answer = reloadAnswer(
      [
        { pid: 1, outcome: took("v2", "unchanged") },
        { pid: 2, outcome: took("v2") },
      ],
      { workers: true },
    );
    expect(answer).toEqual({
      kind: "reloaded",
      changed: true,
      version: "v2",
      source: "POLICY_FILE p.yaml",
      workers: [
        { pid: 1, result: "unchanged", version: "v2" },
        { pid: 2, result: "changed", version: "v2" },
      ],
    });
  });

  it("is invalid when every worker refused the file and all keep one version", () => {
    const refused: ReloadOutcome = {
      policy: {
        result: "invalid",
        version: "v1",
        problems: ["p.yaml: tiers: bad"],
        source: "POLICY_FILE p.yaml",
      },
    };
    expect(
      reloadAnswer(
        [
          { pid: 1, outcome: refused },
          { pid: 2, outcome: refused },
        ],
        { workers: true },
      ),
    ).toMatchObject({ kind: "invalid", problems: ["p.yaml: tiers: bad"], version: "v1" });
  });

  it("is incomplete when the workers end on different versions, of the policy or of RLS_CONFIG", () => {
    const policySplit = reloadAnswer(
      [
        { pid: 1, outcome: took("v2") },
        { pid: 2, outcome: took("v3") },
      ],
      { workers: true },
    );
    expect(policySplit).toMatchObject({ kind: "incomplete" });
    expect(policySplit.kind === "incomplete" && policySplit.message).toContain("different versions (v2, v3)");
    const rlsSplit = reloadAnswer(
      [
        { pid: 1, outcome: { ...took("v2"), rls } },
        { pid: 2, outcome: { ...took("v2"), rls: { result: "invalid", version: "r1", problems: ["x"] } } },
      ],
      { workers: true },
    );
    expect(rlsSplit).toMatchObject({ kind: "incomplete" });
    expect(rlsSplit.kind === "incomplete" && rlsSplit.message).toContain("RLS_CONFIG");
  });

  it("is incomplete, naming the worker, when one did not confirm", () => {
    const answer = reloadAnswer(
      [
        { pid: 1, outcome: took("v2") },
        { pid: 2, unconfirmed: "timeout" },
      ],
      { workers: true },
    );
    expect(answer).toEqual({
      kind: "incomplete",
      message: "The reload was not confirmed by 1 of 2 workers: pid 2 (timeout)",
      workers: [
        { pid: 1, result: "changed", version: "v2" },
        { pid: 2, result: "timeout" },
      ],
    });
  });
});
