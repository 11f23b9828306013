// A descriptor's `rate_limit` of RLS_CONFIG read and checked (unit, requests_per_unit, name,
// unlimited, replaces, and tollgate's algorithm and unit_multiplier), each problem with its line:
// the file reader (load.ts) builds on it.
import { type Document, isScalar, type LineCounter } from "yaml";
import { MAX_COUNT } from "../config/rules.js";
import {
  MAX_REQUESTS_PER_UNIT,
  RLS_ALGORITHMS,
  RLS_UNIT_SECONDS,
  RLS_UNITS,
  type RlsAlgorithm,
  type RlsLimit,
  type RlsUnit,
} from "./model.js";
import { ruleId } from "./rule-ids.js";
import { type Field, YamlReader } from "./yaml-reader.js";

export class RateLimitReader extends YamlReader {
  protected domainName = "";

  constructor(
    file: string,
    document: Document,
    lines: LineCounter,
    protected readonly defaultAlgorithm: RlsAlgorithm,
  ) {
    super(file, document, lines);
  }

  protected rateLimit(
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
