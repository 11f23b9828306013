// The check path's lean metrics read exactly as prom-client's own would, alone and summed over workers.
import { AggregatorRegistry, Histogram, Registry } from "prom-client";
import { describe, expect, it } from "vitest";
import { createLeanHistogram } from "../../src/metrics/lean-histogram.js";
import { createMetrics } from "../../src/metrics/metrics.js";

const BUCKETS = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25];
const NAME = "tollgate_check_duration_seconds";
const HELP = "Time to answer a check, by proxy protocol";

const leanOn = (registry: Registry) =>
  createLeanHistogram({ name: NAME, help: HELP, labelName: "protocol", buckets: BUCKETS, registry });

/** The same observations in prom-client's Histogram and in the lean one, each on a registry of its own. */
function both(observations: [string, number][]) {
  const reference = new Registry();
  const histogram = new Histogram({
    name: NAME,
    help: HELP,
    labelNames: ["protocol"],
    buckets: BUCKETS,
    registers: [reference],
  });
  const lean = new Registry();
  const leanHistogram = leanOn(lean);
  for (const [protocol, value] of observations) {
    histogram.labels({ protocol }).observe(value);
    leanHistogram.labels(protocol).observe(value);
  }
  return { reference, lean };
}

// Values on bucket bounds, between them and past the last one, for two label values.
const OBSERVATIONS: [string, number][] = [
  ["envoy", 0.00005],
  ["envoy", 0.0001],
  ["envoy", 0.0003],
  ["nginx", 0.004],
  ["envoy", 0.25],
  ["envoy", 3],
  ["nginx", 0.0009],
  ["envoy", 0.012],
];

describe("the lean check-duration histogram", () => {
  it("prints what prom-client's histogram prints for the same observations", async () => {
    const { reference, lean } = both(OBSERVATIONS);
    const text = await lean.metrics();
    expect(text).toBe(await reference.metrics());
    expect(text).toContain('tollgate_check_duration_seconds_bucket{le="0.0001",protocol="envoy"} 2');
    expect(text).toContain('tollgate_check_duration_seconds_count{protocol="nginx"} 2');
  });

  it("sums over workers as prom-client's cluster aggregation sums its own", async () => {
    const first = both(OBSERVATIONS);
    const second = both(OBSERVATIONS.slice(2));
    const sum = async (registries: Registry[]) =>
      (
        await AggregatorRegistry.aggregate(await Promise.all(registries.map((r) => r.getMetricsAsJSON())))
      ).metrics();
    const leanSum = await sum([first.lean, second.lean]);
    expect(leanSum).toBe(await sum([first.reference, second.reference]));
    expect(leanSum).toContain('tollgate_check_duration_seconds_count{protocol="envoy"} 10');
  });

  it("ignores what is not a finite number, as a scrape must never break on it", async () => {
    const registry = new Registry();
    const histogram = leanOn(registry);
    histogram.labels("envoy").observe(Number.NaN);
    histogram.labels("envoy").observe(0.001);
    const text = await registry.metrics();
    expect(text).toContain('tollgate_check_duration_seconds_count{protocol="envoy"} 1');
    expect(text).toContain('tollgate_check_duration_seconds_sum{protocol="envoy"} 0.001');
  });
  it("counts again after a reset, through the children made before it", async () => {
    const registry = new Registry();
    const child = leanOn(registry).labels("envoy");
    child.observe(0.001);
    registry.resetMetrics();
    expect(await registry.metrics()).toContain('tollgate_check_duration_seconds_count{protocol="envoy"} 0');
    child.observe(0.002);
    const text = await registry.metrics();
    expect(text).toContain('tollgate_check_duration_seconds_count{protocol="envoy"} 1');
    expect(text).toContain('tollgate_check_duration_seconds_sum{protocol="envoy"} 0.002');
  });
});

const ALLOW_OK = { decision: "allow", reason: "ok", tier: "pro", category: "general" };

describe("the decision counter", () => {
  it("counts each label set once per inc, however often it is read", async () => {
    const metrics = createMetrics();
    const allow = metrics.decisions.labels(ALLOW_OK);
    const deny = metrics.decisions.labels({
      decision: "deny",
      reason: "rate_limited",
      tier: "free",
      category: "search",
    });
    for (let i = 0; i < 5; i += 1) allow.inc();
    deny.inc();
    const line = (text: string, reason: string) =>
      text
        .split("\n")
        .find((l) => l.startsWith("tollgate_decisions_total{") && l.includes(`reason="${reason}"`));
    const first = await metrics.registry.metrics();
    expect(line(first, "ok")).toBe(
      'tollgate_decisions_total{decision="allow",reason="ok",tier="pro",category="general"} 5',
    );
    expect(line(first, "rate_limited")).toMatch(/ 1$/);
    expect(line(await metrics.registry.metrics(), "ok")).toMatch(/ 5$/);
    allow.inc();
    expect(line(await metrics.registry.metrics(), "ok")).toMatch(/ 6$/);
  });

  it("forgets on a reset what was counted and not yet read, and counts on after it", async () => {
    const metrics = createMetrics();
    const allow = metrics.decisions.labels(ALLOW_OK);
    allow.inc();
    allow.inc();
    metrics.registry.resetMetrics();
    allow.inc();
    const text = await metrics.registry.metrics();
    expect(text).toContain(
      'tollgate_decisions_total{decision="allow",reason="ok",tier="pro",category="general"} 1',
    );
  });
});
