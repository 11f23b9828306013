// Reads what an operator's Prometheus and Grafana are given (prometheus/rules/*.yml, grafana/tollgate.json)
// into the expressions they run, for the static checks and for the test against a real Prometheus.
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { parse } from "yaml";
import { ROOT } from "./processes.mjs";

export const RULES_DIR = join(ROOT, "prometheus/rules");
export const RULE_TESTS_DIR = join(RULES_DIR, "tests");
export const DASHBOARD_PATH = join(ROOT, "grafana/tollgate.json");

export type Rule = {
  file: string;
  group: string;
  record?: string;
  alert?: string;
  expr: string;
  for?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
};

/** The rule files Prometheus loads (prometheus.yml's rule_files: rules/*.yml, not rules/tests/). */
export const ruleFiles = (): string[] =>
  readdirSync(RULES_DIR)
    .filter((name) => name.endsWith(".yml"))
    .sort()
    .map((name) => join(RULES_DIR, name));

export const ruleTestFiles = (): string[] =>
  readdirSync(RULE_TESTS_DIR)
    .filter((name) => name.endsWith(".yml"))
    .sort()
    .map((name) => join(RULE_TESTS_DIR, name));

export function rules(): Rule[] {
  return ruleFiles().flatMap((file) => {
    const doc = parse(readFileSync(file, "utf8")) as {
      groups: { name: string; rules: Omit<Rule, "file" | "group">[] }[];
    };
    return doc.groups.flatMap((group) =>
      group.rules.map((rule) => ({ ...rule, expr: rule.expr.trim(), file, group: group.name })),
    );
  });
}

type Target = { expr?: string; refId?: string; datasource?: { type?: string; uid?: string } };
export type Panel = {
  id: number;
  type: string;
  title: string;
  datasource?: { type?: string; uid?: string };
  gridPos: { h: number; w: number; x: number; y: number };
  targets?: Target[];
  panels?: Panel[];
};
export type Dashboard = {
  uid: string;
  title: string;
  schemaVersion: number;
  panels: Panel[];
  templating: { list: { name: string; type: string; query: unknown; definition?: string }[] };
};

export const dashboard = (): Dashboard => JSON.parse(readFileSync(DASHBOARD_PATH, "utf8")) as Dashboard;

/** Every panel, those inside collapsed rows included. */
export const allPanels = (d: Dashboard): Panel[] => d.panels.flatMap((p) => [p, ...(p.panels ?? [])]);

/** Each query of each panel, as written (with Grafana's variables). */
export function panelQueries(d: Dashboard): { panel: string; refId: string; expr: string }[] {
  return allPanels(d).flatMap((panel) =>
    (panel.targets ?? []).map((t) => ({ panel: panel.title, refId: t.refId ?? "?", expr: t.expr ?? "" })),
  );
}

/**
 * An expression as Grafana would send it: the dashboard's job variable (its "All" is the regex
 * `.+`) and the rate interval (Grafana makes it at least four scrape intervals) replaced by values.
 */
export function substitute(expr: string, values: { job: string; rateInterval: string }): string {
  return expr.replaceAll("$__rate_interval", values.rateInterval).replaceAll("$job", values.job);
}

const KEYWORDS = new Set([
  "and",
  "or",
  "unless",
  "bool",
  "offset",
  "by",
  "without",
  "on",
  "ignoring",
  "group_left",
  "group_right",
]);

/**
 * The vector selectors of a PromQL expression (`metric{matchers}`), in order: what it reads. Good
 * for the expressions in this repository (no string literals outside matchers, no `@`).
 */
export function vectorSelectors(expr: string): string[] {
  const bare = expr
    .replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, " ")
    .replace(/\[[^\]]*\]/g, " ");
  const found: string[] = [];
  for (const match of bare.matchAll(/([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\{[^}]*\})?(\s*\()?/g)) {
    const [, name, matchers, call] = match;
    if (call !== undefined && matchers === undefined) continue; // a function: sum(, rate(, vector(
    if (KEYWORDS.has(name as string)) continue;
    found.push(`${name}${matchers ?? ""}`);
  }
  return found;
}
