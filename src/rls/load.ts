// Reading RLS_CONFIG: one YAML file, or a folder of them (laid out as the reference's runtime
// directory or not), each file one domain. Every problem of every file is collected, each naming its
// file, line and field, and thrown as one RlsConfigError: a configuration is applied whole or not at all.
import { readFileSync } from "node:fs";
import { type Document, isScalar, LineCounter, type Node, parseAllDocuments } from "yaml";
import { errorCode, listFiles } from "./files.js";
import {
  type RlsAlgorithm,
  type RlsConfig,
  RlsConfigError,
  type RlsDomain,
  type RlsLevel,
  type RlsNode,
} from "./model.js";
import { RateLimitReader } from "./rate-limit-reader.js";
import { indexLevel, versionOf } from "./rule-ids.js";
import type { Field } from "./yaml-reader.js";

/**
 * The files of RLS_CONFIG as read once, with the problems of reading them: under WORKERS the
 * supervisor reads them and every worker parses the same texts, so that a change between two reads
 * never leaves the workers on two configurations.
 */
export type RlsSource = {
  files: ({ name: string; text: string } | { name: string; unreadable: string })[];
  /** The path or a folder under it could not be listed. */
  problems: string[];
};

export function readRlsSource(path: string): RlsSource {
  const problems: string[] = [];
  const files = listFiles(path, problems).map((file) => {
    try {
      return { name: file.name, text: readFileSync(file.full, "utf8") };
    } catch (error) {
      return { name: file.name, unreadable: errorCode(error) };
    }
  });
  return { files, problems };
}

export function loadRlsConfig(path: string, options: { defaultAlgorithm: RlsAlgorithm }): RlsConfig {
  return rlsConfigFrom(path, readRlsSource(path), options);
}

/** The configuration that the files read from RLS_CONFIG (`path`) hold; throws RlsConfigError. */
export function rlsConfigFrom(
  path: string,
  source: RlsSource,
  options: { defaultAlgorithm: RlsAlgorithm },
): RlsConfig {
  const problems = [...source.problems];
  const domains = new Map<string, { domain: RlsDomain; line: number }>();
  for (const file of source.files) {
    if ("unreadable" in file) {
      problems.push(`${file.name}: cannot be read (${file.unreadable})`);
      continue;
    }
    const read = readFile(file.name, file.text, options.defaultAlgorithm);
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
    files: source.files.map((f) => f.name),
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
  // A document marker with nothing after it (a file ending in `---`) adds no document: the
  // reference reads the first one and so loads such a file.
  const [first, second] = documents.filter(
    (d, i) => i === 0 || !(d.contents === null || (isScalar(d.contents) && d.contents.value === null)),
  );
  if (second !== undefined) {
    const line = second.range ? lines.linePos(second.range[0]).line : 1;
    return {
      domain: undefined,
      line: 1,
      problems: [`${file}:${line}: several YAML documents: a file holds one domain (split it into files)`],
    };
  }
  const reader = new FileReader(file, first as Document, lines, defaultAlgorithm);
  const domain = reader.readRoot();
  // By line, so that a file's problems read top to bottom (sort is stable: same-line ones keep their order).
  const sorted = reader.problems.sort((a, b) => a.line - b.line).map((p) => p.text);
  return { domain: sorted.length > 0 ? undefined : domain, line: reader.domainLine, problems: sorted };
}

class FileReader extends RateLimitReader {
  domainLine = 1;

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
}

/** A level of the stats path: `key_value`, or `key` for a default (the reference's composite key). */
function pathPart(key: string, value: string | undefined): string {
  return value === undefined ? key : `${key}_${value}`;
}
