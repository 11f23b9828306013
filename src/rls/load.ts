// Reading RLS_CONFIG: one YAML file, or a folder of them (laid out as the reference's runtime
// directory or not), each file one domain. Every problem of every file is collected, each naming its
// file, line and field, and thrown as one RlsConfigError: a configuration is applied whole or not at all.
import { readFileSync } from "node:fs";
import { type Document, isScalar, LineCounter, type Node, parseAllDocuments } from "yaml";
import { MAX_COUNT } from "../config/rules.js";
import { errorCode, listFiles } from "./files.js";
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
import { indexLevel, ruleId, versionOf } from "./rule-ids.js";
import { type Field, YamlReader } from "./yaml-reader.js";

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

class FileReader extends YamlReader {
  domainLine = 1;
  private domainName = "";

  constructor(
    file: string,
    document: Document,
    lines: LineCounter,
    private readonly defaultAlgorithm: RlsAlgorithm,
  ) {
    super(file, document, lines);
  }

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
}

/** A level of the stats path: `key_value`, or `key` for a default (the reference's composite key). */
function pathPart(key: string, value: string | undefined): string {
  return value === undefined ? key : `${key}_${value}`;
}
