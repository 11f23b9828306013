// Offline validation of a policy file and an RLS configuration with the loaders tollgate itself runs,
// every problem as `file:line: field: what` (the RLS loader's form; policy problems get their line here).
import { existsSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { isAlias, isMap, isSeq, LineCounter, type Node, parseDocument } from "yaml";
import { type ProviderTiers, providerTierProblems } from "../config/identity-settings.js";
import { PolicyError, parsePolicy } from "../policy/policy.js";
import { policyVersion } from "../policy/policy-state.js";
import { loadRlsConfig } from "../rls/load.js";
import { type RlsAlgorithm, RlsConfigError } from "../rls/model.js";

export type Validation =
  | { ok: true; summary: string; details: Record<string, unknown> }
  | { ok: false; problems: string[] };

/** `tiers.free.general` or `routes[0].method` as keys and indexes. */
const segments = (field: string): string[] =>
  [...field.matchAll(/([^.[\]]+)|\[(\d+)\]/g)].map((m) => (m[1] ?? m[2]) as string);

type Ranged = { range?: readonly number[] | null | undefined } | null | undefined;

/** The pair whose key is parts[i] (or parts[i..j] joined by dots: an invalid name may hold one). */
function findKey(map: Node, parts: readonly string[], i: number) {
  if (!isMap(map)) return undefined;
  for (let j = i; j < parts.length; j += 1) {
    const key = parts.slice(i, j + 1).join(".");
    const pair = map.items.find((p) => String((p.key as { value?: unknown } | null)?.value) === key);
    if (pair !== undefined) return { pair, used: j - i + 1 };
  }
  return undefined;
}

/** The line of the deepest node the field path reaches (a missing field: its parent's line). */
function lineOf(text: string, field: string): number {
  const lines = new LineCounter();
  const document = parseDocument(text, { lineCounter: lines, uniqueKeys: false });
  const lineAt = (node: Ranged, fallback: number) =>
    node?.range ? lines.linePos(node.range[0] ?? 0).line : fallback;
  let node = document.contents as Node | null;
  let line = lineAt(node, 1);
  const parts = field === "(top level)" ? [] : segments(field);
  for (let i = 0; i < parts.length && node !== null; ) {
    if (isAlias(node)) node = (node.resolve(document) as Node | undefined) ?? null;
    if (isSeq(node)) {
      node = (node.items[Number(parts[i])] as Node | undefined) ?? null;
      line = lineAt(node, line);
      i += 1;
      continue;
    }
    const found = node === null ? undefined : findKey(node, parts, i);
    if (found === undefined) return line;
    line = lineAt(found.pair.key as Ranged, line);
    node = (found.pair.value as Node | null) ?? null;
    i += found.used;
  }
  return line;
}

/** A problem of PolicyError ("<source>: <field>: <what>") with the line of its field. */
function withLine(file: string, text: string, problem: string): string {
  const rest = problem.startsWith(`${file}: `) ? problem.slice(file.length + 2) : problem;
  const parser = /^not valid YAML or JSON: .*\(line (\d+), column \d+\)$/.exec(rest);
  if (parser !== null) return `${file}:${parser[1]}: ${rest}`;
  // An unknown key is found under its parent (zod names the parent; at the top level, nothing).
  const unknown = /^(?:([^ ]+): )?unknown keys? "([^"]+)"/.exec(rest);
  if (unknown !== null) {
    const field = unknown[1] === undefined ? unknown[2] : `${unknown[1]}.${unknown[2]}`;
    return `${file}:${lineOf(text, field ?? "(top level)")}: ${rest}`;
  }
  const at = rest.indexOf(": ");
  return `${file}:${at < 1 ? 1 : lineOf(text, rest.slice(0, at))}: ${rest}`;
}

/**
 * `providerTiers`: the provider settings in the environment, so that a policy the server would refuse
 * for lacking a tier they name (at start and on reload) is refused here too, with the same check.
 */
export function validatePolicy(file: string, providerTiers?: ProviderTiers): Validation {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (error) {
    return {
      ok: false,
      problems: [`${file}: cannot read the file (${(error as NodeJS.ErrnoException).code})`],
    };
  }
  try {
    const policy = parsePolicy(text, file);
    const unmet = providerTiers === undefined ? [] : providerTierProblems(providerTiers, policy.tiers.keys());
    if (unmet.length > 0)
      return { ok: false, problems: unmet.map((p) => `${file}:${lineOf(text, "tiers")}: ${p}`) };
    const version = policyVersion(policy);
    const counts = { tiers: policy.tiers.size, routes: policy.routes.length, version };
    return {
      ok: true,
      summary: `${file}: valid policy, version ${version} (${counts.tiers} tiers, ${counts.routes} routes)`,
      details: { file, ...counts },
    };
  } catch (error) {
    if (!(error instanceof PolicyError)) throw error;
    return { ok: false, problems: error.problems.map((p) => withLine(file, text, p)) };
  }
}

/** The folder whose files the loader names its problems after (RLS_CONFIG's runtime layout included). */
function namesBase(path: string): string | undefined {
  try {
    if (!statSync(path).isDirectory()) return undefined;
  } catch {
    return undefined;
  }
  const runtime = join(path, "config");
  return existsSync(runtime) && statSync(runtime).isDirectory() ? runtime : path;
}

export function validateRls(path: string, defaultAlgorithm: RlsAlgorithm): Validation {
  try {
    const config = loadRlsConfig(path, { defaultAlgorithm });
    const domains = [...config.domains.keys()].sort();
    return {
      ok: true,
      summary: `${path}: valid RLS configuration, version ${config.version} (${domains.length} domains: ${domains.join(", ") || "none"})`,
      details: { path, version: config.version, domains, files: config.files },
    };
  } catch (error) {
    if (!(error instanceof RlsConfigError)) throw error;
    // The loader names files relative to the folder; the full path lets an editor jump to the line.
    const base = namesBase(path);
    const full = (problem: string) => {
      const name = /^([^:]+):\d+: /.exec(problem)?.[1];
      return base !== undefined && name !== undefined && existsSync(join(base, name))
        ? `${join(base, name)}${problem.slice(name.length)}`
        : base === undefined && name !== undefined && path.endsWith(name)
          ? `${path}${problem.slice(name.length)}`
          : problem;
    };
    return { ok: false, problems: error.problems.map(full) };
  }
}
