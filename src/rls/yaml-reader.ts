// Reading one YAML document of RLS_CONFIG: nodes resolved (aliases, nulls), their lines, each
// level's known fields, and typed values, every problem recorded with its file, line and field.
import {
  type Document,
  isAlias,
  isMap,
  isScalar,
  isSeq,
  type LineCounter,
  type Node,
  type Scalar,
} from "yaml";
import type { RlsLimit } from "./model.js";

export type Level = "root" | "descriptor" | "rate_limit" | "replaces";
const FIELDS: Record<Level, readonly string[]> = {
  root: ["domain", "descriptors", "all_or_none"],
  descriptor: [
    "key",
    "value",
    "rate_limit",
    "descriptors",
    "shadow_mode",
    "quota_mode",
    "detailed_metric",
    "value_to_metric",
    "share_threshold",
    "metadata",
  ],
  rate_limit: ["unit", "requests_per_unit", "unlimited", "name", "replaces", "algorithm", "unit_multiplier"],
  replaces: ["name"],
};
const LEVEL_NAMES: Record<Level, string> = {
  root: "the top level",
  descriptor: "a descriptor",
  rate_limit: "rate_limit",
  replaces: "a replaces entry",
};

/**
 * Loads RLS_CONFIG. `path` is a YAML file, or a folder: when it holds a `config` folder (the
 * reference's RUNTIME_ROOT/RUNTIME_SUBDIRECTORY), that folder is read, else `path` itself; either is
 * read with its subfolders, taking every `*.yaml` and `*.yml` file and skipping names that start
 * with "." (editor files, and Kubernetes' `..data` folders of a mounted ConfigMap). An empty folder
 * gives a configuration without domains. Throws RlsConfigError listing every problem.
 */
export type Fields = Map<string, { node: Node | null; line: number }>;

export type Field = { node: Node | null; line: number };

function describeNode(node: Node): string {
  if (isMap(node)) return "a mapping";
  if (isSeq(node)) return "a list";
  if (isScalar(node)) {
    const shown = typeof node.value === "string" ? `"${node.value}"` : String(node.source ?? node.value);
    return typeof node.value === "string" ? `the string ${shown}` : shown;
  }
  return "an alias";
}

export class YamlReader {
  readonly problems: { line: number; text: string }[] = [];

  constructor(
    protected readonly file: string,
    protected readonly document: Document,
    protected readonly lines: LineCounter,
  ) {}

  protected resolve(node: Node | null | undefined): Node | null {
    if (node === null || node === undefined) return null;
    if (isAlias(node)) return (node.resolve(this.document) as Node | undefined) ?? null;
    if (isScalar(node) && node.value === null) return null;
    return node;
  }

  protected lineOf(node: Node): number {
    return node.range ? this.lines.linePos(node.range[0]).line : 1;
  }

  protected problem(line: number, path: string, message: string): void {
    this.problems.push({ line, text: `${this.file}:${line}: ${path === "" ? "" : `${path}: `}${message}` });
  }

  /** A mapping's fields, each checked against its level; undefined (with a problem) when it is no mapping. */
  protected fields(raw: Node | null, path: string, level: Level): Fields | undefined {
    const node = this.resolve(raw);
    const where = path === "" ? "(top level)" : path;
    if (node === null || !isMap(node)) {
      const line = node !== null ? this.lineOf(node) : raw !== null ? this.lineOf(raw) : 1;
      const got = node === null ? "nothing" : describeNode(node);
      this.problem(line, where, `expected a mapping (${LEVEL_NAMES[level]}), found ${got}`);
      return undefined;
    }
    const fields: Fields = new Map();
    for (const pair of node.items) {
      const keyNode = pair.key as Node | null;
      const line =
        keyNode && "range" in keyNode && keyNode.range ? this.lines.linePos(keyNode.range[0]).line : 1;
      if (isScalar(keyNode) && keyNode.source === "<<") {
        this.problem(line, where, "merge keys (<<) are not supported: write the fields out");
        continue;
      }
      if (!isScalar(keyNode) || typeof keyNode.value !== "string") {
        const shown = isScalar(keyNode) ? String(keyNode.source ?? keyNode.value) : "a collection";
        this.problem(line, where, `a field name must be a string, not ${shown}`);
        continue;
      }
      const name = keyNode.value;
      const fieldPath = path === "" ? name : `${path}.${name}`;
      if (!FIELDS[level].includes(name)) {
        const home = (Object.keys(FIELDS) as Level[]).find((l) => l !== level && FIELDS[l].includes(name));
        this.problem(
          line,
          fieldPath,
          home === undefined
            ? `unknown field (${LEVEL_NAMES[level]} has: ${FIELDS[level].join(", ")})`
            : `not a field of ${LEVEL_NAMES[level]}: it belongs to ${LEVEL_NAMES[home]}`,
        );
        continue;
      }
      fields.set(name, { node: this.resolve(pair.value as Node | null), line });
    }
    return fields;
  }

  /** A scalar as text: strings as they are, numbers and booleans as written (yaml.v2 does so). */
  protected string(field: Field | undefined, path: string): string | undefined {
    if (field === undefined || field.node === null) return undefined;
    const node = field.node;
    if (!isScalar(node)) {
      this.problem(field.line, path, `expected a string, found ${describeNode(node)}`);
      return undefined;
    }
    if (typeof node.value === "string") return node.value;
    return (node as Scalar).source ?? String(node.value);
  }

  protected boolean(field: Field | undefined, path: string): boolean {
    if (field === undefined || field.node === null) return false;
    const node = field.node;
    if (isScalar(node) && typeof node.value === "boolean") return node.value;
    this.problem(field.line, path, `expected true or false, found ${describeNode(node)}`);
    return false;
  }

  protected integer(field: Field, path: string, min: number, max: number): number | undefined {
    const node = field.node;
    if (node === null || !isScalar(node) || typeof node.value !== "number" || !Number.isInteger(node.value)) {
      this.problem(
        field.line,
        path,
        `expected a whole number, found ${node === null ? "nothing" : describeNode(node)}`,
      );
      return undefined;
    }
    if (node.value < min || node.value > max) {
      const range = max === Number.MAX_SAFE_INTEGER ? `at least ${min}` : `${min} to ${max}`;
      this.problem(field.line, path, `${node.value} is out of range (${range})`);
      return undefined;
    }
    return node.value;
  }

  protected list(field: Field | undefined, path: string): (Node | null)[] {
    if (field === undefined || field.node === null) return [];
    if (!isSeq(field.node)) {
      this.problem(field.line, path, `expected a list, found ${describeNode(field.node)}`);
      return [];
    }
    // Items stay as written (an empty one keeps its line); readers resolve them.
    return field.node.items.map((item) => item as Node | null);
  }

  protected metadata(field: Field | undefined, path: string): RlsLimit["metadata"] {
    if (field === undefined || field.node === null) return undefined;
    if (!isMap(field.node)) {
      this.problem(field.line, path, `expected a mapping, found ${describeNode(field.node)}`);
      return undefined;
    }
    return field.node.toJSON() as Record<string, unknown>;
  }
}
