// prometheus/rules/ through Prometheus's own tool: promtool checks every rule file and runs the unit
// tests of prometheus/rules/tests/, which make each alert fire on synthetic series and stay silent on
// others; and every alert carries what an on-call needs (severity, summary, a runbook that exists).
import { execFileSync, spawnSync } from "node:child_process";
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { describe, expect, it } from "vitest";
import { parse, stringify } from "yaml";
import { createMetrics } from "../../src/metrics/metrics.js";
import { findBinary } from "../support/binaries.js";
import { RULES_DIR, ruleFiles, rules, ruleTestFiles } from "../support/observability.js";
import { ROOT } from "../support/processes.mjs";

/** promtool comes with Debian's prometheus package (.ci/run installs it); missing, this fails. */
const promtool = () => findBinary("promtool");

const run = (args: string[]) => {
  const result = spawnSync(promtool(), args, { cwd: ROOT, encoding: "utf8" });
  return { status: result.status, output: `${result.stdout}${result.stderr}` };
};

/** GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces to hyphens. */
const anchor = (heading: string) =>
  heading
    .trim()
    .toLowerCase()
    .replace(/[^a-z0-9 _-]/g, "")
    .replace(/ /g, "-");

describe("prometheus/rules", () => {
  it("passes promtool check rules, every file and every rule", () => {
    const files = ruleFiles().map((f) => relative(ROOT, f));
    expect(files.length).toBeGreaterThanOrEqual(2);
    const { status, output } = run(["check", "rules", ...files]);
    expect(status, output).toBe(0);
    const counted = [...output.matchAll(/SUCCESS: (\d+) rules found/g)].reduce((n, m) => n + Number(m[1]), 0);
    expect(counted).toBe(rules().length);
  });

  it("passes promtool test rules: each alert fires on series made to trip it and not on others, each recording rule records its known value", () => {
    const files = ruleTestFiles().map((f) => relative(ROOT, f));
    expect(files.length).toBeGreaterThan(0);
    const { status, output } = run(["test", "rules", ...files]);
    expect(status, output).toBe(0);
    expect(output).not.toMatch(/FAILED/);
  });

  it("has a unit test for every alert that expects it to fire and one that expects silence", () => {
    type AlertTest = { alertname: string; exp_alerts?: unknown[] };
    const cases = ruleTestFiles().flatMap((file) => {
      const doc = parse(readFileSync(file, "utf8")) as { tests: { alert_rule_test?: AlertTest[] }[] };
      return doc.tests.flatMap((t) => t.alert_rule_test ?? []);
    });
    for (const { alert } of rules().filter((r) => r.alert !== undefined)) {
      const own = cases.filter((c) => c.alertname === alert);
      expect(
        own.some((c) => (c.exp_alerts ?? []).length > 0),
        `${alert}: no test expects it to fire`,
      ).toBe(true);
      expect(
        own.some((c) => (c.exp_alerts ?? []).length === 0),
        `${alert}: no test expects it silent`,
      ).toBe(true);
    }
  });

  it("has a unit test of every recording rule's value", () => {
    const tested = ruleTestFiles()
      .flatMap((file) => {
        const doc = parse(readFileSync(file, "utf8")) as {
          tests: { promql_expr_test?: { expr: string }[] }[];
        };
        return doc.tests.flatMap((t) => t.promql_expr_test ?? []).map((t) => t.expr);
      })
      .join("\n");
    for (const { record } of rules().filter((r) => r.record !== undefined)) {
      expect(tested, `${record}: no promql_expr_test reads it`).toContain(record);
    }
  });

  it("gives every alert a severity, a summary and a runbook_url naming a paragraph of docs/operations.md", () => {
    const operations = readFileSync(`${ROOT}/docs/operations.md`, "utf8");
    const anchors = new Set([...operations.matchAll(/^#{2,4} (.+)$/gm)].map((m) => anchor(m[1] as string)));
    const alerts = rules().filter((r) => r.alert !== undefined);
    expect(alerts.length).toBeGreaterThanOrEqual(10);
    for (const rule of alerts) {
      expect(["critical", "warning"], `${rule.alert}: severity`).toContain(rule.labels?.severity);
      expect(rule.annotations?.summary, `${rule.alert}: summary`).toBeTruthy();
      const url = rule.annotations?.runbook_url ?? "";
      expect(url, `${rule.alert}: runbook_url`).toMatch(/^docs\/operations\.md#/);
      const target = url.split("#")[1] as string;
      expect(anchors.has(target), `${rule.alert}: no heading of docs/operations.md makes #${target}`).toBe(
        true,
      );
    }
  });

  it("names recorded series with the level:metric:operations convention, each recorded once", () => {
    const recorded = rules().flatMap((r) => (r.record === undefined ? [] : [r.record]));
    for (const name of recorded) expect(name).toMatch(/^[a-z_]+:tollgate_[a-z_]+:[a-z0-9_]+$/);
    expect(new Set(recorded).size).toBe(recorded.length);
  });

  // The unit tests are worth what they catch: each alert's condition, weakened (a threshold lowered, a clause, a
  // label matcher or a `for` gone) or broken (never true), must fail them. A mutation whose text is no longer
  // in the rules fails too: update it with the expression.
  it("fails promtool test rules when any alert's condition is weakened or broken", () => {
    const MUTATIONS: [alert: string, from: string, to: string][] = [
      ["TollgateDown", 'up{job="tollgate"} == 0', 'up{job="tollgate"} >= 0'],
      [
        "TollgateDown",
        'up{job="tollgate"} == 0\n        for: 1m',
        'up{job="tollgate"} == 0\n        for: 0m',
      ],
      ["TollgateAbsent", 'absent(up{job="tollgate"})', 'absent(up{job="tollgate-admin"})'],
      [
        "TollgateAbsent",
        'absent(up{job="tollgate"})\n        for: 5m',
        'absent(up{job="tollgate"})\n        for: 1m',
      ],
      ["TollgateStoreDown", "tollgate_store_up == 0", "tollgate_store_up >= 0"],
      [
        "TollgateChecksDegraded",
        "(rate(tollgate_degraded_total[5m])) > 0",
        "(rate(tollgate_degraded_total[5m])) >= 0",
      ],
      [
        "TollgateChecksDegraded",
        "(rate(tollgate_degraded_total[5m])) > 0",
        "(rate(tollgate_degraded_total[5m])) > 1",
      ],
      ["TollgateCheckLatencyNearTimeout", 'p99_5m{protocol!="envoy-rls"} > 0.15', "p99_5m > 0.15"],
      [
        "TollgateCheckLatencyNearTimeout",
        'p99_5m{protocol!="envoy-rls"} > 0.15',
        'p99_5m{protocol!="envoy-rls"} > 0.3',
      ],
      [
        "TollgateRlsLatencyNearTimeout",
        'p99_5m{protocol="envoy-rls"} > 0.015',
        'p99_5m{protocol="envoy-rls"} > 0.001',
      ],
      [
        "TollgateDenyRatioSpike",
        "job:tollgate_deny_ratio:rate5m > 0.25\n",
        "job:tollgate_deny_ratio:rate5m > 0\n",
      ],
      [
        "TollgateDenyRatioSpike",
        "\n            and job:tollgate_deny_ratio:rate5m > 2 * job:tollgate_deny_ratio:rate1h",
        "",
      ],
      ["TollgateDenyRatioSpike", "and job:tollgate_checks:rate5m > 1", "and job:tollgate_checks:rate5m > 0"],
      [
        "TollgatePolicyReloadFailed",
        'tollgate_policy_reloads_total{result="invalid"}',
        "tollgate_policy_reloads_total",
      ],
      [
        "TollgateRlsReloadFailed",
        'tollgate_rls_config_reloads_total{result="invalid"}',
        "tollgate_rls_config_reloads_total",
      ],
      [
        "TollgateLockoutSpike",
        'tollgate_auth_events_total{event="lockout"}[10m])) > 20',
        'tollgate_auth_events_total{event="lockout"}[10m])) > 5',
      ],
      ["TollgateLockoutSpike", 'tollgate_auth_events_total{event="lockout"}', "tollgate_auth_events_total"],
      [
        "TollgateRlsOverLimitSpike",
        "job_domain:tollgate_rls_over_ratio:rate5m > 0.25\n",
        "job_domain:tollgate_rls_over_ratio:rate5m > 0.9\n",
      ],
      [
        "TollgateRlsOverLimitSpike",
        "\n            and job_domain:tollgate_rls_over_ratio:rate5m > 2 * job_domain:tollgate_rls_over_ratio:rate1h",
        "",
      ],
      [
        "TollgateRlsOverLimitSpike",
        "and job_domain:tollgate_rls_hits:rate5m > 1",
        "and job_domain:tollgate_rls_hits:rate5m > 0",
      ],
    ];
    const alertsFile = "tollgate-alerts.yml";
    const original = readFileSync(join(RULES_DIR, alertsFile), "utf8");
    // Every alert has at least one mutation.
    const mutated = new Set(MUTATIONS.map(([alert]) => alert));
    for (const { alert } of rules().filter((r) => r.alert !== undefined))
      expect(mutated, alert).toContain(alert);
    type AlertTests = { tests: { alert_rule_test?: { alertname: string }[] }[] };
    const testFile = ruleTestFiles().find((f) => f.endsWith("tollgate-alerts.test.yml")) as string;
    const suite = parse(readFileSync(testFile, "utf8")) as AlertTests;
    const dir = mkdtempSync(join(tmpdir(), "tollgate-rules-"));
    try {
      cpSync(RULES_DIR, dir, { recursive: true });
      // Only the test groups of the mutated alert: the hour-long series of the others take seconds.
      const tests = join(dir, relative(RULES_DIR, testFile));
      const survived: string[] = [];
      for (const [alert, from, to] of MUTATIONS) {
        expect(original.split(from), `${alert}: "${from}" is no longer in ${alertsFile}`).toHaveLength(2);
        writeFileSync(join(dir, alertsFile), original.replace(from, to));
        const own = suite.tests.filter((t) => (t.alert_rule_test ?? []).some((a) => a.alertname === alert));
        writeFileSync(tests, stringify({ ...suite, tests: own }));
        if (run(["test", "rules", tests]).status === 0) survived.push(`${alert}: ${from} -> ${to}`);
      }
      expect(survived).toEqual([]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);

  // histogram_quantile is exact at a bucket bound and interpolates between two: a threshold between
  // bounds would fire on a p99 well under it (anything past the lower bound can read as past it).
  it("sets each latency alert's threshold on a bucket bound of tollgate_check_duration_seconds", async () => {
    const metrics = createMetrics();
    metrics.checkDuration.labels("envoy").observe(0.001);
    const text = await metrics.registry.metrics();
    const bounds = [...text.matchAll(/^tollgate_check_duration_seconds_bucket\{le="([^"]+)"/gm)].map((m) =>
      Number(m[1]),
    );
    const latency = rules().filter(
      (r) => r.alert !== undefined && r.expr.includes("tollgate_check_duration"),
    );
    expect(latency.map((r) => r.alert).sort()).toEqual([
      "TollgateCheckLatencyNearTimeout",
      "TollgateRlsLatencyNearTimeout",
    ]);
    for (const rule of latency) {
      const threshold = Number(/>\s*([0-9.]+)$/.exec(rule.expr)?.[1]);
      expect(bounds, `${rule.alert}: ${threshold}`).toContain(threshold);
    }
  });

  it("finds promtool", () => {
    expect(execFileSync(promtool(), ["--version"], { encoding: "utf8" })).toMatch(/promtool, version/);
  });
});
