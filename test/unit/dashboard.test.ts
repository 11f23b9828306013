// grafana/tollgate.json and its provisioning in docker-compose.yml, read as Grafana and compose read
// them: the data-source variable, every query on it, the recorded series it reads defined by the rules,
// and every file mounted where Grafana and Prometheus look. (Whether each query returns data from a
// real tollgate: test/e2e/prometheus.test.ts.)
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { parse } from "yaml";
import {
  allPanels,
  dashboard,
  panelQueries,
  rules,
  substitute,
  vectorSelectors,
} from "../support/observability.js";
import { ROOT } from "../support/processes.mjs";

type Node = Record<string, unknown>;
const load = (path: string): Node => parse(readFileSync(join(ROOT, path), "utf8")) as Node;
const services = load("docker-compose.yml").services as Record<string, Node>;
/** The host path of the read-only mount of `service` whose container path is `target`. */
const mountOf = (service: string, target: string): string | undefined =>
  ((services[service]?.volumes ?? []) as string[])
    .map((v) => v.split(":"))
    .find(([, to, mode]) => to === target && mode === "ro")?.[0];

/** The data source of every panel and query: Grafana's variable syntax, not a template literal. */
const PICKED = { type: "prometheus", uid: ["$", "{datasource}"].join("") };

const d = dashboard();
const queries = panelQueries(d);

describe("grafana/tollgate.json", () => {
  it("is a current Grafana dashboard with a Prometheus data-source variable and a job variable", () => {
    expect(d.uid).toBe("tollgate");
    expect(d.schemaVersion).toBeGreaterThanOrEqual(41);
    const [datasource, job] = d.templating.list;
    expect(datasource).toMatchObject({ name: "datasource", type: "datasource", query: "prometheus" });
    expect(job).toMatchObject({
      name: "job",
      type: "query",
      definition: "label_values(tollgate_store_up, job)",
    });
  });

  it("asks every panel and every query for the data source the variable picks", () => {
    for (const panel of allPanels(d).filter((p) => p.type !== "row")) {
      expect(panel.datasource, panel.title).toEqual(PICKED);
      expect(panel.targets?.length, panel.title).toBeGreaterThan(0);
      for (const target of panel.targets ?? []) {
        expect(target.datasource, panel.title).toEqual(PICKED);
      }
    }
  });

  it("gives each panel its own id and a place on the 24-column grid, none overlapping", () => {
    const panels = allPanels(d);
    expect(new Set(panels.map((p) => p.id)).size).toBe(panels.length);
    const cells = new Set<string>();
    for (const { title, gridPos } of panels) {
      expect(gridPos.x + gridPos.w, title).toBeLessThanOrEqual(24);
      for (let x = gridPos.x; x < gridPos.x + gridPos.w; x += 1) {
        for (let y = gridPos.y; y < gridPos.y + gridPos.h; y += 1) {
          expect(cells.has(`${x},${y}`), `${title} overlaps at ${x},${y}`).toBe(false);
          cells.add(`${x},${y}`);
        }
      }
    }
  });

  it("filters every query by the job variable and uses no variable but $job and $__rate_interval", () => {
    expect(queries.length).toBeGreaterThan(20);
    for (const { panel, expr } of queries) {
      for (const selector of vectorSelectors(expr)) expect(selector, panel).toContain('job=~"$job"');
      expect(substitute(expr, { job: "tollgate", rateInterval: "1m" }), panel).not.toContain("$");
    }
  });

  it("reads only recorded series that the recording rules define", () => {
    const recorded = new Set(rules().flatMap((r) => (r.record === undefined ? [] : [r.record])));
    const read = queries.flatMap(({ expr }) =>
      vectorSelectors(expr)
        .map((s) => s.split("{")[0] as string)
        .filter((name) => name.includes(":")),
    );
    expect(read.length).toBeGreaterThan(0);
    for (const name of read) expect(recorded, name).toContain(name);
  });

  it("has a panel for each thing an operator watches", () => {
    const all = queries.map((q) => q.expr).join("\n");
    for (const needed of [
      "tollgate_decisions_total",
      'decision="deny"',
      "tollgate_check_duration_seconds:p99_5m",
      'protocol="envoy-rls"',
      "tollgate_store_up",
      "tollgate_degraded_total",
      "tollgate_denial_cache_share",
      'event=~"login|login_failed"',
      'event="lockout"',
      "session_revoked",
      "tollgate_policy_reloads_total",
      "tollgate_rls_config_reloads_total",
      'result="near"',
      'result=~"over|cached"',
      "process_cpu_seconds_total",
      "process_resident_memory_bytes",
      "tollgate_workers",
    ]) {
      expect(all, needed).toContain(needed);
    }
  });
});

describe("the compose stack's Grafana and Prometheus", () => {
  it("runs Grafana on the host's loopback with the provisioning files and the dashboard mounted", () => {
    const grafana = services.grafana as Node;
    expect(grafana.ports).toEqual(["127.0.0.1:3000:3000"]);
    expect(mountOf("grafana", "/etc/grafana/provisioning")).toBe("./grafana/provisioning");
    expect(mountOf("grafana", "/etc/grafana/dashboards/tollgate.json")).toBe("./grafana/tollgate.json");
    expect(grafana.depends_on).toContain("prometheus");
  });

  it("provisions the stack's Prometheus as the data source and loads the dashboard from where it is mounted", () => {
    const datasources = load("grafana/provisioning/datasources/prometheus.yml").datasources as Node[];
    expect(datasources).toHaveLength(1);
    expect(datasources[0]).toMatchObject({ type: "prometheus", url: "http://prometheus:9090" });
    const providers = load("grafana/provisioning/dashboards/tollgate.yml").providers as Node[];
    expect(providers).toHaveLength(1);
    expect(providers[0]).toMatchObject({ type: "file", options: { path: "/etc/grafana/dashboards" } });
    const home = ((services.grafana as Node).environment as Node).GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH;
    expect(home).toBe("/etc/grafana/dashboards/tollgate.json");
  });

  it("has Prometheus load every rule file from where the compose stack mounts prometheus/rules", () => {
    const config = load("prometheus/prometheus.yml");
    expect(config.rule_files).toEqual(["/etc/prometheus/rules/*.yml"]);
    expect(mountOf("prometheus", "/etc/prometheus/rules")).toBe("./prometheus/rules");
    expect(existsSync(join(ROOT, "prometheus/rules/tollgate-alerts.yml"))).toBe(true);
    // The job TollgateDown watches is the one that scrapes tollgate.
    const jobs = (config.scrape_configs as Node[]).map((job) => job.job_name);
    expect(jobs).toContain("tollgate");
    const down = rules().find((r) => r.alert === "TollgateDown");
    expect(down?.expr).toBe('up{job="tollgate"} == 0');
  });
});

describe("vectorSelectors", () => {
  it("finds the series an expression reads, not its functions, keywords or grouping labels", () => {
    expect(
      vectorSelectors(
        'sum by (job, le) (rate(a_bucket{x="1"}[5m])) / ignoring(le) group_left b:c:d > 2 * vector(1) and on (job) up',
      ),
    ).toEqual(['a_bucket{x="1"}', "b:c:d", "up"]);
  });
});
