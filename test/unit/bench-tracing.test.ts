// How the bench judges what tracing costs (bench/lib/tracing.mjs): this build's allowed check with
// tracing off against the compare build's, and tracing on against off, for information.
import { describe, expect, it } from "vitest";
import { type TracingReportRow, tracingTargets } from "../../bench/lib/tracing.mjs";

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
