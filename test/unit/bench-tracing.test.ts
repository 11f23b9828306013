// How the bench judges what tracing costs (bench/lib/tracing.mjs): this build's allowed check with
// tracing off against the compare build's, and tracing on against off, for information.
import { describe, expect, it } from "vitest";
import { type Paired, type TracingReportRow, tracingTargets } from "../../bench/lib/tracing.mjs";

const row = (id: string, rps: number, short = id): TracingReportRow => ({
  id,
  short,
  load: { rps },
  serverCpuUsPerRequest: 1e6 / rps,
});

describe("the bench's tracing targets", () => {
  it("meet the tracing-off target within 2% of the compare build, and not below", () => {
    const judge = (rps: number) =>
      tracingTargets({ allowed: row("allowed", rps), "allowed-compare": row("allowed-compare", 10_000) })[0];
    expect(judge(9_800)?.met).toBe(true);
    expect(judge(10_500)?.met).toBe(true);
    expect(judge(9_790)?.met).toBe(false);
    expect(judge(9_790)?.figure).toContain("97.9% (9,790 vs 10,000 checks/s)");
  });

  it("judge by the median of the pairs of slices back to back when they were measured, and show the rows too", () => {
    const pair = (ratios: number[]): Record<string, Paired> => ({
      "allowed/allowed-compare": {
        numerator: "allowed",
        denominator: "allowed-compare",
        seconds: 2,
        ratios,
        median: [...ratios].sort((a, b) => a - b)[Math.floor(ratios.length / 2)] ?? Number.NaN,
        cpuMedian: 1,
      },
    });
    const rows = { allowed: row("allowed", 8_500), "allowed-compare": row("allowed-compare", 10_000) };
    // The rows alone miss (85%); the pairs, the same machine for both sides of each, hold.
    const held = tracingTargets(rows, pair([0.97, 0.99, 1.01, 0.6, 1.0]))[0];
    expect(held?.met).toBe(true);
    expect(held?.target).toContain("judged by the pairs of slices back to back");
    expect(held?.figure).toContain("median 0.99× of 5 pairs of 2 s slices back to back (0.60–1.01");
    expect(held?.figure).toContain("the rows: 85.0% (8,500 vs 10,000 checks/s)");
    // And the other way: rows that hold do not save pairs that miss.
    const level = { allowed: row("allowed", 10_000), "allowed-compare": row("allowed-compare", 10_000) };
    expect(tracingTargets(level, pair([0.95, 0.96, 0.97]))[0]?.met).toBe(false);
  });

  it("judge nothing without a compare build, and report the tracing-on row against off", () => {
    const targets = tracingTargets({
      allowed: row("allowed", 10_000),
      "allowed-traced": row("allowed-traced", 8_000, "allowed, tracing on (0.1)"),
    });
    expect(targets).toHaveLength(1);
    expect(targets[0]).toMatchObject({ met: true });
    expect(targets[0]?.target).toContain("0.1 of the checks sampled");
    expect(targets[0]?.figure).toContain("80.0% (8,000 vs 10,000 checks/s)");
  });
});
