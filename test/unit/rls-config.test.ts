// Loading the RLS configuration (src/rls/load.ts): one fixture per invalid configuration with its
// messages (file, line, field), folders of domains, the reference's runtime layout, duplicate domains,
// tollgate's additions and the version. The invalid fixtures port the reference's own
// (envoyproxy/ratelimit test/config/*.yaml, TestEmptyDomain … TestUnlimitedWithRateLimitUnit).
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { loadRlsConfig } from "../../src/rls/load.js";
import { type RlsConfig, RlsConfigError, type RlsLevel, type RlsLimit } from "../../src/rls/model.js";

const fixture = (name: string) => new URL(`../fixtures/rls/${name}`, import.meta.url).pathname;
const load = (name: string, defaultAlgorithm: RlsConfig["defaultAlgorithm"] = "fixed-window") =>
  loadRlsConfig(fixture(name), { defaultAlgorithm });

function problemsOf(name: string): string[] {
  try {
    load(name);
  } catch (error) {
    if (error instanceof RlsConfigError) return error.problems;
    throw error;
  }
  throw new Error(`${name} was accepted`);
}

const UNITS = "(second, minute, hour, day, week, month, year)";
const DESCRIPTOR_FIELDS =
  "key, value, rate_limit, descriptors, shadow_mode, quota_mode, detailed_metric, value_to_metric, share_threshold, metadata";

/** fixture → every problem it must give, in order. "(ref)" marks the reference's own fixtures. */
const INVALID: Record<string, string[]> = {
  // (ref) TestBadLimitUnit: "invalid rate limit unit 'foo'"
  "bad_limit_unit.yaml": [
    `bad_limit_unit.yaml:6: descriptors[0].rate_limit.unit: unknown unit "minutes" ${UNITS}`,
  ],
  // (ref) TestBadYaml
  "bad_yaml.yaml": ["bad_yaml.yaml:2: not valid YAML: Missing closing 'quote"],
  // (ref) TestEmptyDomain: "config file cannot have empty domain"
  "empty_domain.yaml": ["empty_domain.yaml:1: domain: required"],
  "empty_file.yaml": ["empty_file.yaml:1: domain: required (the file is empty)"],
  // (ref) TestEmptyKey: "descriptor has empty key"
  "empty_key.yaml": ["empty_key.yaml:3: descriptors[0].key: required"],
  // (ref) TestDuplicateKey: "duplicate descriptor composite key 'test-domain.key1_value1'"
  "duplicate_key.yaml": [
    'duplicate_key.yaml:6: descriptors[1]: duplicate descriptor "test-domain.key1_value1" (first at line 3)',
  ],
  "duplicate_nested_key.yaml": [
    'duplicate_nested_key.yaml:7: descriptors[0].descriptors[1]: duplicate descriptor "test-domain.key1.sub" (first at line 5)',
  ],
  // (ref) TestMisspelledKey: "config error, unknown key 'ratelimit'" / 'requestsperunit'
  "misspelled_key.yaml": [
    `misspelled_key.yaml:5: descriptors[0].ratelimit: unknown field (a descriptor has: ${DESCRIPTOR_FIELDS})`,
  ],
  "misspelled_key2.yaml": [
    "misspelled_key2.yaml:5: descriptors[0].rate_limit.requests_per_unit: required (0 refuses every request: write it when that is meant)",
    "misspelled_key2.yaml:7: descriptors[0].rate_limit.requestsperunit: unknown field (rate_limit has: unit, requests_per_unit, unlimited, name, replaces, algorithm, unit_multiplier)",
  ],
  // The reference's key check ignores levels: there, shadow_mode inside rate_limit is silently ignored.
  "misplaced_shadow_mode.yaml": [
    "misplaced_shadow_mode.yaml:7: descriptors[0].rate_limit.shadow_mode: not a field of rate_limit: it belongs to a descriptor",
  ],
  // (ref) TestNonMapList: "config error, yaml file contains list of type other than map: a"
  "non_map_list.yaml": [
    'non_map_list.yaml:3: descriptors[0]: expected a mapping (a descriptor), found the string "a"',
    'non_map_list.yaml:4: descriptors[1]: expected a mapping (a descriptor), found the string "b"',
  ],
  // (ref) TestNonStringKey: "config error, key is not of type string: 0.25"
  "non_string_key.yaml": [
    "non_string_key.yaml:1: (top level): a field name must be a string, not 0.25",
    "non_string_key.yaml:1: domain: required",
  ],
  // (ref) TestReplacesEmpty: "should not have an empty replaces entry"
  "replaces_empty.yaml": [
    "replaces_empty.yaml:10: descriptors[0].descriptors[0].rate_limit.replaces[0].name: required (the name of the rate_limit this one replaces)",
  ],
  // (ref) TestReplacesSelf: "replaces should not contain name of same descriptor"
  "replaces_self.yaml": [
    'replaces_self.yaml:10: descriptors[0].descriptors[0].rate_limit.replaces[0].name: a rate_limit cannot replace itself ("self")',
  ],
  // (ref) TestUnlimitedWithRateLimitUnit: "should not specify rate limit unit when unlimited"
  "unlimited_with_unit.yaml": [
    "unlimited_with_unit.yaml:6: descriptors[0].rate_limit.unit: must not be set when unlimited is true (nothing is counted)",
  ],
  "unlimited_with_algorithm.yaml": [
    "unlimited_with_algorithm.yaml:6: descriptors[0].rate_limit.algorithm: must not be set when unlimited is true (nothing is counted)",
  ],
  // The reference: "share_threshold can only be used with wildcard values"
  "share_without_wildcard.yaml": [
    'share_without_wildcard.yaml:5: descriptors[0].share_threshold: only for a wildcard value (one holding "*"); the value is "files/a"',
  ],
  "unknown_algorithm.yaml": [
    'unknown_algorithm.yaml:7: descriptors[0].rate_limit.algorithm: unknown algorithm "leaky-bucket" (fixed-window, sliding-log, sliding-counter, gcra)',
  ],
  "zero_multiplier.yaml": [
    "zero_multiplier.yaml:6: descriptors[0].rate_limit.unit_multiplier: 0 is out of range (at least 1)",
  ],
  "negative_requests.yaml": [
    "negative_requests.yaml:6: descriptors[0].rate_limit.requests_per_unit: -1 is out of range (0 to 4294967295)",
  ],
  "huge_requests.yaml": [
    "huge_requests.yaml:6: descriptors[0].rate_limit.requests_per_unit: 4294967296 is out of range (0 to 4294967295)",
  ],
  "fractional_requests.yaml": [
    "fractional_requests.yaml:6: descriptors[0].rate_limit.requests_per_unit: expected a whole number, found 1.5",
  ],
  "string_requests.yaml": [
    'string_requests.yaml:6: descriptors[0].rate_limit.requests_per_unit: expected a whole number, found the string "10"',
  ],
  // The reference reads an absent requests_per_unit as 0, which refuses everything.
  "missing_requests_per_unit.yaml": [
    "missing_requests_per_unit.yaml:4: descriptors[0].rate_limit.requests_per_unit: required (0 refuses every request: write it when that is meant)",
  ],
  "missing_unit.yaml": [`missing_unit.yaml:4: descriptors[0].rate_limit.unit: required ${UNITS}`],
  "not_a_boolean.yaml": [
    'not_a_boolean.yaml:2: all_or_none: expected true or false, found the string "sometimes"',
    "not_a_boolean.yaml:5: descriptors[0].shadow_mode: expected true or false, found 1",
  ],
  "several_documents.yaml": [
    "several_documents.yaml:3: several YAML documents: a file holds one domain (split it into files)",
  ],
  "list_root.yaml": ["list_root.yaml:1: (top level): expected a mapping (the top level), found a list"],
  "duplicate_yaml_field.yaml": ["duplicate_yaml_field.yaml:4: not valid YAML: Map keys must be unique"],
  "empty_descriptor.yaml": [
    "empty_descriptor.yaml:5: descriptors[1]: expected a mapping (a descriptor), found nothing",
  ],
  "descriptors_not_a_list.yaml": [
    "descriptors_not_a_list.yaml:2: descriptors: expected a list, found a mapping",
  ],
  "merge_key.yaml": [
    `merge_key.yaml:8: descriptors[1].rate_limit.unit: required ${UNITS}`,
    "merge_key.yaml:9: descriptors[1].rate_limit: merge keys (<<) are not supported: write the fields out",
  ],
  "many_problems.yaml": [
    `many_problems.yaml:5: descriptors[0].rate_limit.unit: unknown unit "fortnight" ${UNITS}`,
    "many_problems.yaml:6: descriptors[0].rate_limit.requests_per_unit: -5 is out of range (0 to 4294967295)",
    "many_problems.yaml:7: descriptors[1].key: required",
    'many_problems.yaml:12: descriptors[2].rate_limit.algorithm: unknown algorithm "token-bucket" (fixed-window, sliding-log, sliding-counter, gcra)',
    `many_problems.yaml:15: descriptors[2].descriptors[0].colour: unknown field (a descriptor has: ${DESCRIPTOR_FIELDS})`,
  ],
};

describe("an invalid configuration", () => {
  it.each(Object.entries(INVALID))(
    "%s gives its problems, each with file, line and field",
    (name, expected) => {
      expect(problemsOf(`invalid/${name}`)).toEqual(expected);
    },
  );

  it("throws one RlsConfigError whose message lists every problem", () => {
    let thrown: unknown;
    try {
      load("invalid/many_problems.yaml");
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(RlsConfigError);
    const message = (thrown as Error).message;
    expect(message.split("\n")[0]).toContain("is invalid");
    for (const problem of INVALID["many_problems.yaml"] ?? []) expect(message).toContain(problem);
  });

  it("in a folder fails the whole folder (nothing applied), naming the file", () => {
    expect(problemsOf("partly-invalid")).toEqual([
      `bad.yaml:4: descriptors[0].rate_limit.unit: unknown unit "minutes" ${UNITS}`,
    ]);
  });

  it("a path that does not exist", () => {
    const missing = fixture("no-such-thing");
    expect(problemsOf("no-such-thing")).toEqual([`${missing}: cannot be read (ENOENT)`]);
  });
});

const limitAt = (level: RlsLevel, ...path: [string, string | undefined][]): RlsLimit | undefined => {
  let node = level.nodes.find((n) => n.key === path[0]?.[0] && n.value === path[0]?.[1]);
  for (const [key, value] of path.slice(1))
    node = node?.children.nodes.find((n) => n.key === key && n.value === value);
  return node?.limit;
};

describe("a valid configuration", () => {
  it("reads the reference's basic configuration into a tree", () => {
    const config = load("valid/basic.yaml");
    expect(config.files).toEqual(["basic.yaml"]);
    const domain = config.domains.get("test-domain");
    expect(domain?.file).toBe("basic.yaml");
    expect(domain?.allOrNone).toBe(false);
    const root = domain?.root as RlsLevel;
    expect(root.nodes.map((n) => [n.key, n.value ?? null, n.line])).toEqual([
      ["key1", "value1", 5],
      ["key2", null, 19],
      ["key2", "value2", 23],
      ["key2", "value3", 28],
      ["key3", null, 31],
      ["key4", null, 36],
      ["key5", "value5", 43],
      ["key6", null, 55],
      ["key7", null, 59],
    ]);
    expect(limitAt(root, ["key1", "value1"])).toBeUndefined();
    expect(limitAt(root, ["key1", "value1"], ["subkey1", "subvalue1"])).toMatchObject({
      unit: "second",
      requestsPerUnit: 10,
      windowMs: 1000,
      statsKey: "test-domain.key1_value1.subkey1_subvalue1",
      source: "basic.yaml:14",
    });
    expect(limitAt(root, ["key4", undefined])).toMatchObject({
      name: "key4_rate_limit",
      unit: "day",
      windowMs: 86_400_000,
    });
    expect(limitAt(root, ["key6", undefined])).toMatchObject({
      unlimited: true,
      requestsPerUnit: 0,
      windowMs: 0,
    });
    expect(limitAt(root, ["key7", undefined])).toMatchObject({
      detailedMetric: true,
      statsKey: "test-domain.key7",
    });
  });

  it("reads tollgate's additions and the reference's other fields", () => {
    const config = load("valid/tollgate.yaml", "sliding-counter");
    const domain = config.domains.get("shop");
    expect(domain?.allOrNone).toBe(true);
    const root = domain?.root as RlsLevel;
    expect(limitAt(root, ["remote_address", undefined])).toMatchObject({
      unit: "minute",
      unitMultiplier: 5,
      windowMs: 300_000,
      requestsPerUnit: 100,
      algorithm: "sliding-log",
    });
    // unit is read case-insensitively, as the reference upper-cases it; the default algorithm applies.
    expect(limitAt(root, ["generic_key", "checkout"])).toMatchObject({
      name: "checkout",
      unit: "minute",
      unitMultiplier: 1,
      algorithm: "sliding-counter",
      quotaMode: true,
      metadata: { team: "payments", tier: { level: 2 } },
    });
    expect(limitAt(root, ["user", "vip"])?.replaces).toEqual(["checkout"]);
    expect(limitAt(root, ["internal", undefined])).toMatchObject({ unlimited: true, replaces: ["checkout"] });
    expect(limitAt(root, ["route", undefined], ["method", undefined], ["subject", undefined])).toMatchObject({
      algorithm: "gcra",
      windowMs: 3_600_000,
    });
    // 0 is allowed: it refuses every request (the reference's Example 3 black list).
    expect(limitAt(root, ["blocked", undefined])?.requestsPerUnit).toBe(0);
  });

  it("gives each rule an id that follows its place, window and algorithm, not its limit", () => {
    const a = load("valid/tollgate.yaml");
    const b = load("valid/tollgate.yaml", "gcra");
    const root = (c: RlsConfig) => c.domains.get("shop")?.root as RlsLevel;
    const ids = (c: RlsConfig) => root(c).nodes.map((n) => n.limit?.id);
    expect(new Set(ids(a).filter(Boolean)).size).toBe(ids(a).filter(Boolean).length);
    expect(ids(load("valid/tollgate.yaml"))).toEqual(ids(a));
    // remote_address names its algorithm; checkout follows the default, which changed.
    expect(limitAt(root(b), ["remote_address", undefined])?.id).toBe(
      limitAt(root(a), ["remote_address", undefined])?.id,
    );
    expect(limitAt(root(b), ["generic_key", "checkout"])?.id).not.toBe(
      limitAt(root(a), ["generic_key", "checkout"])?.id,
    );
    expect(a.version).not.toBe(b.version);
  });

  it("has a version that follows the meaning, not the file's text", () => {
    const folder = mkdtempSync(join(tmpdir(), "rls-version-"));
    const versionOf = (text: string) => {
      writeFileSync(join(folder, "x.yaml"), text);
      return loadRlsConfig(folder, { defaultAlgorithm: "fixed-window" }).version;
    };
    try {
      const base = versionOf(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5}\n",
      );
      const reformatted = versionOf(
        "# a comment\ndomain: d\ndescriptors:\n\n  - key: k\n    rate_limit:\n      requests_per_unit: 5\n      unit: MINUTE\n",
      );
      const changed = versionOf(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 6}\n",
      );
      expect(reformatted).toBe(base);
      expect(changed).not.toBe(base);
    } finally {
      rmSync(folder, { recursive: true, force: true });
    }
  });

  it("reads yes/no as booleans and numbers as text where text is expected, as yaml.v2 does", () => {
    const folder = mkdtempSync(join(tmpdir(), "rls-yaml11-"));
    try {
      writeFileSync(
        join(folder, "x.yaml"),
        "domain: 42\ndescriptors:\n  - key: code\n    value: 010\n    shadow_mode: yes\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
      );
      const config = loadRlsConfig(folder, { defaultAlgorithm: "fixed-window" });
      const node = config.domains.get("42")?.root.nodes[0];
      expect(node?.value).toBe("010");
      expect(node?.limit?.shadowMode).toBe(true);
    } finally {
      rmSync(folder, { recursive: true, force: true });
    }
  });
  it("reads a file that ends in a document marker, as yaml.v2 reads its first document", () => {
    const folder = mkdtempSync(join(tmpdir(), "rls-marker-"));
    try {
      writeFileSync(
        join(folder, "x.yaml"),
        "---\ndomain: marked\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n---\n# nothing more\n",
      );
      const config = loadRlsConfig(folder, { defaultAlgorithm: "fixed-window" });
      expect(config.domains.get("marked")?.root.nodes.map((n) => n.key)).toEqual(["a"]);
    } finally {
      rmSync(folder, { recursive: true, force: true });
    }
  });
});

describe("a folder", () => {
  it("holds several domains, read with its subfolders, *.yaml and *.yml only, dot files skipped", () => {
    const config = load("folder");
    expect(config.files).toEqual(["a.yaml", "b.yml", "sub/c.yaml"]);
    expect([...config.domains.keys()].sort()).toEqual(["alpha", "beta", "gamma"]);
    expect(config.domains.get("gamma")?.file).toBe("sub/c.yaml");
  });

  it("laid out as the reference's runtime directory reads its config/ folder only", () => {
    const config = load("runtime");
    expect(config.files).toEqual(["config/messaging.yaml", "config/ratelimit.yaml"]);
    expect([...config.domains.keys()].sort()).toEqual(["edge_proxy_per_ip", "messaging"]);
  });

  it("names both files of a duplicate domain", () => {
    expect(problemsOf("duplicate")).toEqual([
      'two.yaml:2: domain: duplicate domain "dup", already defined in one.yaml:1',
    ]);
  });

  it("that is empty gives a configuration without domains", () => {
    const folder = mkdtempSync(join(tmpdir(), "rls-empty-"));
    try {
      const config = loadRlsConfig(folder, { defaultAlgorithm: "fixed-window" });
      expect(config.domains.size).toBe(0);
      expect(config.files).toEqual([]);
    } finally {
      rmSync(folder, { recursive: true, force: true });
    }
  });
});
