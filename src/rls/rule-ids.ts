// What load.ts derives from a loaded tree: each level's lookup indexes, a rule's stable id, and
// the configuration's version (a hash of its meaning, not of files, lines or comments).
import { createHash } from "node:crypto";
import type { RlsAlgorithm, RlsDomain, RlsLevel, RlsLimit, RlsNode } from "./model.js";

export function indexLevel(nodes: RlsNode[]): RlsLevel {
  const exact = new Map<string, Map<string, RlsNode>>();
  const wildcards = new Map<string, RlsNode[]>();
  const defaults = new Map<string, RlsNode>();
  for (const node of nodes) {
    if (node.value === undefined) {
      defaults.set(node.key, node);
      continue;
    }
    const values = exact.get(node.key) ?? new Map<string, RlsNode>();
    exact.set(node.key, values);
    values.set(node.value, node);
    if (node.wildcard !== undefined) {
      const list = wildcards.get(node.key) ?? [];
      wildcards.set(node.key, list);
      list.push(node);
    }
  }
  return { nodes, exact, wildcards, defaults };
}

const hash = (parts: unknown): string => createHash("sha256").update(JSON.stringify(parts)).digest("hex");

export function ruleId(
  domain: string,
  statsPath: readonly string[],
  window: string,
  algorithm: string,
): string {
  return `rls-${hash([domain, statsPath, window, algorithm]).slice(0, 16)}`;
}

/** The id of a descriptor's own limit override in `domain` (see limitsFor). */
export function overrideId(domain: string, windowMs: number, algorithm: RlsAlgorithm): string {
  return ruleId(domain, ["(override)"], `${windowMs}`, algorithm);
}

export function versionOf(domains: ReadonlyMap<string, RlsDomain>): string {
  const limitMeaning = (l: RlsLimit | undefined) =>
    l && [
      l.name ?? null,
      l.unit,
      l.unitMultiplier,
      l.requestsPerUnit,
      l.algorithm,
      l.unlimited,
      l.shadowMode,
      l.quotaMode,
      l.replaces,
      l.detailedMetric,
      l.metadata ?? null,
    ];
  const levelMeaning = (level: RlsLevel): unknown[] =>
    level.nodes.map((n) => [
      n.key,
      n.value ?? null,
      n.shareThreshold,
      n.valueToMetric,
      n.detailedMetric,
      limitMeaning(n.limit) ?? null,
      levelMeaning(n.children),
    ]);
  const sorted = [...domains.values()].sort((a, b) => (a.domain < b.domain ? -1 : 1));
  return hash(sorted.map((d) => [d.domain, d.allOrNone, levelMeaning(d.root)])).slice(0, 16);
}
