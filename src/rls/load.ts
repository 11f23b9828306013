// Reading RLS_CONFIG: one YAML file, or a folder of them (laid out as the reference's runtime
// directory or not), each file one domain. Every problem of every file is collected, each naming its
// file, line and field, and thrown as one RlsConfigError: a configuration is applied whole or not at all.
import { createHash } from "node:crypto";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { basename, extname, join, relative, sep } from "node:path";
import {
  type Document,
  isAlias,
  isMap,
  isScalar,
  isSeq,
  LineCounter,
  type Node,
  parseAllDocuments,
  type Scalar,
} from "yaml";
import { MAX_COUNT } from "../config/rules.js";
import {
  MAX_REQUESTS_PER_UNIT,
  RLS_ALGORITHMS,
  RLS_UNIT_SECONDS,
  RLS_UNITS,
  type RlsAlgorithm,
  type RlsConfig,
  RlsConfigError,
  type RlsDomain,
  type RlsLevel,
  type RlsLimit,
  type RlsNode,
  type RlsUnit,
} from "./model.js";

const YAML_EXTENSIONS = new Set([".yaml", ".yml"]);
/** Folders nested deeper than this under RLS_CONFIG are not read (a guard against symlink loops). */
const MAX_FOLDER_DEPTH = 8;

type Level = "root" | "descriptor" | "rate_limit" | "replaces";
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
export function loadRlsConfig(path: string, options: { defaultAlgorithm: RlsAlgorithm }): RlsConfig {
  const problems: string[] = [];
  const files = listFiles(path, problems);
  const domains = new Map<string, { domain: RlsDomain; line: number }>();
  for (const file of files) {
    let text: string;
    try {
      text = readFileSync(file.full, "utf8");
    } catch (error) {
      problems.push(`${file.name}: cannot be read (${errorCode(error)})`);
      continue;
    }
    const read = readFile(file.name, text, options.defaultAlgorithm);
    problems.push(...read.problems);
    if (read.domain === undefined) continue;
    const first = domains.get(read.domain.domain);
    if (first !== undefined) {
      problems.push(
        `${file.name}:${read.line}: domain: duplicate domain "${read.domain.domain}", already defined in ${first.domain.file}:${first.line}`,
      );
      continue;
    }
    domains.set(read.domain.domain, { domain: read.domain, line: read.line });
  }
  if (problems.length > 0) throw new RlsConfigError(path, problems);
  const byName = new Map([...domains.values()].map(({ domain }) => [domain.domain, domain]));
  return {
    domains: byName,
    version: versionOf(byName),
    files: files.map((f) => f.name),
    defaultAlgorithm: options.defaultAlgorithm,
  };
}

type FileRef = { name: string; full: string };

function errorCode(error: unknown): string {
  return (error as NodeJS.ErrnoException).code ?? String(error);
}

function listFiles(path: string, problems: string[]): FileRef[] {
  let stats: ReturnType<typeof statSync>;
  try {
    stats = statSync(path);
  } catch (error) {
    problems.push(`${path}: cannot be read (${errorCode(error)})`);
    return [];
  }
  if (!stats.isDirectory()) return [{ name: basename(path), full: path }];
  const runtime = join(path, "config");
  const isRuntimeLayout = (() => {
    try {
      return statSync(runtime).isDirectory();
    } catch {
      return false;
    }
  })();
  const found: FileRef[] = [];
  walk(isRuntimeLayout ? runtime : path, 0);
  return found.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));

  function walk(folder: string, depth: number): void {
    let names: string[];
    try {
      names = readdirSync(folder);
    } catch (error) {
      problems.push(`${relative(path, folder) || "."}: cannot be read (${errorCode(error)})`);
      return;
    }
    for (const name of names) {
      if (name.startsWith(".")) continue;
      const full = join(folder, name);
      let entry: ReturnType<typeof statSync>;
      try {
        entry = statSync(full);
      } catch {
        continue; // a dangling symlink
      }
      if (entry.isDirectory()) {
        if (depth < MAX_FOLDER_DEPTH) walk(full, depth + 1);
      } else if (YAML_EXTENSIONS.has(extname(name).toLowerCase())) {
        found.push({ name: relative(path, full).split(sep).join("/"), full });
      }
    }
  }
}

/** One file's domain (undefined when it has problems), and the line of its `domain` field. */
function readFile(
  file: string,
  text: string,
  defaultAlgorithm: RlsAlgorithm,
): { domain: RlsDomain | undefined; line: number; problems: string[] } {
  const lines = new LineCounter();
  // YAML 1.1, as the reference's gopkg.in/yaml.v2 reads it: yes/no/on/off are booleans.
  const documents = parseAllDocuments(text, { lineCounter: lines, version: "1.1", prettyErrors: false });
  const problems: string[] = [];
  if (!Array.isArray(documents) || documents.length === 0) {
    return { domain: undefined, line: 1, problems: [`${file}:1: domain: required (the file is empty)`] };
  }
  for (const document of documents) {
    for (const error of document.errors) {
      const line = lines.linePos(error.pos[0]).line;
      problems.push(`${file}:${line}: not valid YAML: ${error.message.split("\n")[0]}`);
    }
  }
  if (problems.length > 0) return { domain: undefined, line: 1, problems };
  if (documents.length > 1) {
    const second = documents[1] as Document;
    const line = second.range ? lines.linePos(second.range[0]).line : 1;
    return {
      domain: undefined,
      line: 1,
      problems: [`${file}:${line}: several YAML documents: a file holds one domain (split it into files)`],
    };
  }
  const reader = new FileReader(file, documents[0] as Document, lines, defaultAlgorithm);
  const domain = reader.readRoot();
  // By line, so that a file's problems read top to bottom (sort is stable: same-line ones keep their order).
  const sorted = reader.problems.sort((a, b) => a.line - b.line).map((p) => p.text);
  return { domain: sorted.length > 0 ? undefined : domain, line: reader.domainLine, problems: sorted };
}

type Fields = Map<string, { node: Node | null; line: number }>;

class FileReader {
  readonly problems: { line: number; text: string }[] = [];
  domainLine = 1;
  private domainName = "";

  constructor(
    private readonly file: string,
    private readonly document: Document,
    private readonly lines: LineCounter,
    private readonly defaultAlgorithm: RlsAlgorithm,
  ) {}

  readRoot(): RlsDomain | undefined {
    const root = this.resolve(this.document.contents as Node | null);
    if (root === null) {
      this.problem(1, "domain", "required (the file holds no mapping)");
      return undefined;
    }
    const fields = this.fields(root, "", "root");
    if (fields === undefined) return undefined;
    const domainField = fields.get("domain");
    this.domainLine = domainField?.line ?? this.lineOf(root);
    const domain = this.string(domainField, "domain");
    if (domain === undefined || domain === "") {
      this.problem(this.domainLine, "domain", domain === "" ? "must not be empty" : "required");
    }
    this.domainName = domain ?? "";
    const allOrNone = this.boolean(fields.get("all_or_none"), "all_or_none");
    const rootLevel = this.level(fields.get("descriptors"), "descriptors", []);
    if (domain === undefined || domain === "") return undefined;
    return { domain, file: this.file, allOrNone, root: rootLevel };
  }

  private level(field: Field | undefined, path: string, parents: readonly string[]): RlsLevel {
    const nodes: RlsNode[] = [];
    const items = this.list(field, path);
    const seen = new Map<string, Map<string, number>>();
    for (const [i, item] of items.entries()) {
      const itemPath = `${path}[${i}]`;
      const node = this.descriptor(item, itemPath, parents);
      if (node === undefined) continue;
      const values = seen.get(node.key) ?? new Map<string, number>();
      seen.set(node.key, values);
      const first = values.get(node.value ?? "");
      if (first !== undefined) {
        const composite = [this.domainName, ...parents, pathPart(node.key, node.value)].join(".");
        this.problem(node.line, itemPath, `duplicate descriptor "${composite}" (first at line ${first})`);
        continue;
      }
      values.set(node.value ?? "", node.line);
      nodes.push(node);
    }
    return indexLevel(nodes);
  }

  private descriptor(raw: Node | null, path: string, parents: readonly string[]): RlsNode | undefined {
    const line = raw === null ? 0 : this.lineOf(raw);
    const fields = this.fields(raw, path, "descriptor");
    if (fields === undefined) return undefined;
    const keyField = fields.get("key");
    const key = this.string(keyField, `${path}.key`);
    if (key === undefined) {
      if (keyField === undefined || keyField.node === null || isScalar(keyField.node)) {
        this.problem(
          keyField?.line ?? line,
          `${path}.key`,
          keyField === undefined ? "required" : "must not be empty",
        );
      }
    } else if (key === "") {
      this.problem(keyField?.line ?? line, `${path}.key`, "must not be empty");
    }
    const valueField = fields.get("value");
    const rawValue = this.string(valueField, `${path}.value`);
    const value = rawValue === "" ? undefined : rawValue;
    const shadowMode = this.boolean(fields.get("shadow_mode"), `${path}.shadow_mode`);
    const quotaMode = this.boolean(fields.get("quota_mode"), `${path}.quota_mode`);
    const detailedMetric = this.boolean(fields.get("detailed_metric"), `${path}.detailed_metric`);
    const valueToMetric = this.boolean(fields.get("value_to_metric"), `${path}.value_to_metric`);
    const shareField = fields.get("share_threshold");
    const shareThreshold = this.boolean(shareField, `${path}.share_threshold`);
    if (shareThreshold && !value?.includes("*")) {
      this.problem(
        shareField?.line ?? line,
        `${path}.share_threshold`,
        `only for a wildcard value (one holding "*"); ${value === undefined ? "there is no value" : `the value is "${value}"`}`,
      );
    }
    const metadata = this.metadata(fields.get("metadata"), `${path}.metadata`);
    const statsPath = [...parents, pathPart(key ?? "", value)];
    const limit = this.rateLimit(fields.get("rate_limit"), `${path}.rate_limit`, {
      statsPath,
      shadowMode,
      quotaMode,
      detailedMetric,
      metadata,
      source: `${this.file}:${fields.get("rate_limit")?.line ?? line}`,
    });
    const children = this.level(fields.get("descriptors"), `${path}.descriptors`, statsPath);
    if (key === undefined || key === "") return undefined;
    return {
      key,
      value,
      wildcard: value?.includes("*") ? value.split("*") : undefined,
      limit,
      shareThreshold,
      valueToMetric,
      detailedMetric,
      children,
      line,
    };
  }

  private rateLimit(
    field: Field | undefined,
    path: string,
    at: {
      statsPath: readonly string[];
      shadowMode: boolean;
      quotaMode: boolean;
      detailedMetric: boolean;
      metadata: RlsLimit["metadata"];
      source: string;
    },
  ): RlsLimit | undefined {
    // `rate_limit:` with nothing after it is no rate limit, as the reference reads it.
    if (field === undefined || field.node === null) return undefined;
    const fields = this.fields(field.node, path, "rate_limit");
    if (fields === undefined) return undefined;
    const problemsBefore = this.problems.length;
    const unlimitedField = fields.get("unlimited");
    const unlimited = this.boolean(unlimitedField, `${path}.unlimited`);
    const unitField = fields.get("unit");
    const unitText = this.string(unitField, `${path}.unit`);
    const unitList = RLS_UNITS.join(", ");
    let unit: RlsUnit = "second";
    if (unlimited) {
      for (const name of ["unit", "algorithm", "unit_multiplier"]) {
        const other = fields.get(name);
        if (other !== undefined && other.node !== null) {
          this.problem(
            other.line,
            `${path}.${name}`,
            "must not be set when unlimited is true (nothing is counted)",
          );
        }
      }
    } else if (unitText === undefined || unitText === "") {
      if (unitField === undefined || unitField.node === null || isScalar(unitField.node)) {
        this.problem(unitField?.line ?? field.line, `${path}.unit`, `required (${unitList})`);
      }
    } else if (Object.hasOwn(RLS_UNIT_SECONDS, unitText.toLowerCase())) {
      unit = unitText.toLowerCase() as RlsUnit;
    } else {
      this.problem(unitField?.line ?? field.line, `${path}.unit`, `unknown unit "${unitText}" (${unitList})`);
    }
    const rpuField = fields.get("requests_per_unit");
    let requestsPerUnit = 0;
    if (rpuField === undefined || rpuField.node === null) {
      if (!unlimited) {
        this.problem(
          rpuField?.line ?? field.line,
          `${path}.requests_per_unit`,
          "required (0 refuses every request: write it when that is meant)",
        );
      }
    } else {
      requestsPerUnit = this.integer(rpuField, `${path}.requests_per_unit`, 0, MAX_REQUESTS_PER_UNIT) ?? 0;
    }
    const name = this.string(fields.get("name"), `${path}.name`) || undefined;
    const replaces: string[] = [];
    for (const [i, item] of this.list(fields.get("replaces"), `${path}.replaces`).entries()) {
      const itemPath = `${path}.replaces[${i}]`;
      const entry = this.fields(item, itemPath, "replaces");
      if (entry === undefined) continue;
      const nameField = entry.get("name");
      const replaced = this.string(nameField, `${itemPath}.name`);
      const itemLine = nameField?.line ?? (item === null ? field.line : this.lineOf(item));
      if (replaced === undefined || replaced === "") {
        if (nameField === undefined || nameField.node === null || isScalar(nameField.node)) {
          this.problem(
            itemLine,
            `${itemPath}.name`,
            "required (the name of the rate_limit this one replaces)",
          );
        }
      } else if (replaced === name) {
        this.problem(itemLine, `${itemPath}.name`, `a rate_limit cannot replace itself ("${name}")`);
      } else {
        replaces.push(replaced);
      }
    }
    const algorithmField = fields.get("algorithm");
    const algorithmText = this.string(algorithmField, `${path}.algorithm`);
    let algorithm = this.defaultAlgorithm;
    if (algorithmText !== undefined) {
      if ((RLS_ALGORITHMS as readonly string[]).includes(algorithmText))
        algorithm = algorithmText as RlsAlgorithm;
      else {
        this.problem(
          algorithmField?.line ?? field.line,
          `${path}.algorithm`,
          `unknown algorithm "${algorithmText}" (${RLS_ALGORITHMS.join(", ")})`,
        );
      }
    }
    if (algorithm === "sliding-log" && requestsPerUnit > MAX_COUNT) {
      this.problem(
        rpuField?.line ?? field.line,
        `${path}.requests_per_unit`,
        `sliding-log keeps every request it counts: at most ${MAX_COUNT} per window (sliding-counter, gcra and fixed-window take up to ${MAX_REQUESTS_PER_UNIT})`,
      );
    }
    const multiplierField = fields.get("unit_multiplier");
    let unitMultiplier = 1;
    if (multiplierField !== undefined && multiplierField.node !== null && !unlimited) {
      unitMultiplier =
        this.integer(multiplierField, `${path}.unit_multiplier`, 1, Number.MAX_SAFE_INTEGER) ?? 1;
    }
    const windowMs = RLS_UNIT_SECONDS[unit] * unitMultiplier * 1000;
    if (!Number.isSafeInteger(windowMs)) {
      this.problem(
        multiplierField?.line ?? field.line,
        `${path}.unit_multiplier`,
        "makes the window too long",
      );
    }
    if (this.problems.length > problemsBefore) return undefined;
    return {
      name,
      unit,
      unitMultiplier,
      requestsPerUnit: unlimited ? 0 : requestsPerUnit,
      windowMs: unlimited ? 0 : windowMs,
      algorithm,
      unlimited,
      shadowMode: at.shadowMode,
      quotaMode: at.quotaMode,
      replaces,
      detailedMetric: at.detailedMetric,
      metadata: at.metadata,
      statsKey: [this.domainName, ...at.statsPath].join("."),
      id: ruleId(this.domainName, at.statsPath, unlimited ? "unlimited" : `${windowMs}`, algorithm),
      sharedPatterns: [],
      source: at.source,
    };
  }

  // Reading YAML nodes ---------------------------------------------------------------------------

  private resolve(node: Node | null | undefined): Node | null {
    if (node === null || node === undefined) return null;
    if (isAlias(node)) return (node.resolve(this.document) as Node | undefined) ?? null;
    if (isScalar(node) && node.value === null) return null;
    return node;
  }

  private lineOf(node: Node): number {
    return node.range ? this.lines.linePos(node.range[0]).line : 1;
  }

  private problem(line: number, path: string, message: string): void {
    this.problems.push({ line, text: `${this.file}:${line}: ${path === "" ? "" : `${path}: `}${message}` });
  }

  /** A mapping's fields, each checked against its level; undefined (with a problem) when it is no mapping. */
  private fields(raw: Node | null, path: string, level: Level): Fields | undefined {
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
  private string(field: Field | undefined, path: string): string | undefined {
    if (field === undefined || field.node === null) return undefined;
    const node = field.node;
    if (!isScalar(node)) {
      this.problem(field.line, path, `expected a string, found ${describeNode(node)}`);
      return undefined;
    }
    if (typeof node.value === "string") return node.value;
    return (node as Scalar).source ?? String(node.value);
  }

  private boolean(field: Field | undefined, path: string): boolean {
    if (field === undefined || field.node === null) return false;
    const node = field.node;
    if (isScalar(node) && typeof node.value === "boolean") return node.value;
    this.problem(field.line, path, `expected true or false, found ${describeNode(node)}`);
    return false;
  }

  private integer(field: Field, path: string, min: number, max: number): number | undefined {
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

  private list(field: Field | undefined, path: string): (Node | null)[] {
    if (field === undefined || field.node === null) return [];
    if (!isSeq(field.node)) {
      this.problem(field.line, path, `expected a list, found ${describeNode(field.node)}`);
      return [];
    }
    // Items stay as written (an empty one keeps its line); readers resolve them.
    return field.node.items.map((item) => item as Node | null);
  }

  private metadata(field: Field | undefined, path: string): RlsLimit["metadata"] {
    if (field === undefined || field.node === null) return undefined;
    if (!isMap(field.node)) {
      this.problem(field.line, path, `expected a mapping, found ${describeNode(field.node)}`);
      return undefined;
    }
    return field.node.toJSON() as Record<string, unknown>;
  }
}

type Field = { node: Node | null; line: number };

function describeNode(node: Node): string {
  if (isMap(node)) return "a mapping";
  if (isSeq(node)) return "a list";
  if (isScalar(node)) {
    const shown = typeof node.value === "string" ? `"${node.value}"` : String(node.source ?? node.value);
    return typeof node.value === "string" ? `the string ${shown}` : shown;
  }
  return "an alias";
}

/** A level of the stats path: `key_value`, or `key` for a default (the reference's composite key). */
function pathPart(key: string, value: string | undefined): string {
  return value === undefined ? key : `${key}_${value}`;
}

function indexLevel(nodes: RlsNode[]): RlsLevel {
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

function ruleId(domain: string, statsPath: readonly string[], window: string, algorithm: string): string {
  return `rls-${hash([domain, statsPath, window, algorithm]).slice(0, 16)}`;
}

/** The id of a descriptor's own limit override in `domain` (see limitsFor). */
export function overrideId(domain: string, windowMs: number, algorithm: RlsAlgorithm): string {
  return ruleId(domain, ["(override)"], `${windowMs}`, algorithm);
}

function versionOf(domains: ReadonlyMap<string, RlsDomain>): string {
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
