// Matching request descriptors (src/rls/match.ts): which rule each gets, its stats key, replaces
// across the request, a descriptor's own limit, and the subject it is counted under. Ported from
// envoyproxy/ratelimit's test/config/config_test.go (behaviour, not code): TestBasicConfig,
// TestConfigLimitOverride, TestShadowModeConfig, TestWildcardConfig, TestDetailedMetric,
// TestValueToMetric_*, TestShareThreshold and TestWildcardStatsBehavior; replaces from the README's
// Example 7 and constructLimitsToCheck (src/service/ratelimit.go).
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { hashApiKey, newApiKey } from "../../src/auth/api-keys.js";
import { loadRlsConfig } from "../../src/rls/load.js";
import { describeRlsConfig, limitsFor, subjectOf, wildcardMatches } from "../../src/rls/match.js";
import type { RequestDescriptor, RlsConfig, RlsLimit } from "../../src/rls/model.js";

const fixture = (name: string) => new URL(`../fixtures/rls/${name}`, import.meta.url).pathname;
const load = (name: string): RlsConfig => loadRlsConfig(fixture(name), { defaultAlgorithm: "fixed-window" });

const d = (...pairs: [string, string][]): RequestDescriptor => ({
  entries: pairs.map(([key, value]) => ({ key, value })),
});
const one = (config: RlsConfig, domain: string, descriptor: RequestDescriptor) =>
  limitsFor(config, domain, [descriptor])[0];

/** What a case expects of the limit chosen: undefined for none. */
type Expect = Partial<
  Pick<RlsLimit, "requestsPerUnit" | "unit" | "statsKey" | "name" | "unlimited" | "shadowMode">
>;
type Case = [string, RequestDescriptor, Expect | undefined];

function table(config: RlsConfig, domain: string, cases: Case[]) {
  it.each(cases)("%s", (_name, descriptor, expected) => {
    const limit = one(config, domain, descriptor);
    if (expected === undefined) expect(limit).toBeUndefined();
    else expect(limit).toMatchObject(expected);
  });
}

describe("the reference's basic configuration (TestBasicConfig)", () => {
  const basic = load("valid/basic.yaml");
  table(basic, "test-domain", [
    ["no entries", d(), undefined],
    ["a key without a default, another value", d(["key1", "something"]), undefined],
    ["a node without a rate_limit", d(["key1", "value1"]), undefined],
    ["deeper than the tree (leaf reached first)", d(["key2", "value2"], ["subkey", "subvalue"]), undefined],
    ["a nested value that matches nothing", d(["key5", "value5"], ["subkey5", "subvalue"]), undefined],
    ["an unknown key", d(["nope", "x"]), undefined],
    [
      "a nested default",
      d(["key1", "value1"], ["subkey1", "something"]),
      { requestsPerUnit: 5, unit: "second", statsKey: "test-domain.key1_value1.subkey1" },
    ],
    [
      "a nested exact value before the default",
      d(["key1", "value1"], ["subkey1", "subvalue1"]),
      { requestsPerUnit: 10, unit: "second", statsKey: "test-domain.key1_value1.subkey1_subvalue1" },
    ],
    [
      "a default (key only)",
      d(["key2", "something"]),
      { requestsPerUnit: 20, unit: "minute", statsKey: "test-domain.key2" },
    ],
    [
      "an exact value before the default",
      d(["key2", "value2"]),
      { requestsPerUnit: 30, statsKey: "test-domain.key2_value2" },
    ],
    ["a value without rate_limit is not limited (white list)", d(["key2", "value3"]), undefined],
    ["an unnamed rule", d(["key3", "foo"]), { requestsPerUnit: 1, unit: "hour", name: undefined }],
    ["a named rule", d(["key4", "foo"]), { requestsPerUnit: 1, unit: "day", name: "key4_rate_limit" }],
    [
      "a shorter request than the tree gets the node's own limit",
      d(["key5", "value5"]),
      { requestsPerUnit: 15 },
    ],
    ["the deeper node", d(["key5", "value5"], ["subkey5", "subvalue5"]), { requestsPerUnit: 25 }],
    ["too deep below a node with a limit", d(["key3", "foo"], ["extra", "bar"]), undefined],
    ["unlimited", d(["key6", "foo"]), { unlimited: true, statsKey: "test-domain.key6" }],
    [
      "detailed_metric puts the value in the stats key",
      d(["key7", "unspecified_value"]),
      { requestsPerUnit: 70, statsKey: "test-domain.key7_unspecified_value" },
    ],
    [
      "detailed_metric, another value",
      d(["key7", "another_value"]),
      { statsKey: "test-domain.key7_another_value" },
    ],
    ["detailed_metric, an empty value", d(["key7", ""]), { statsKey: "test-domain.key7_" }],
  ]);

  it("an unknown domain gives nothing for every descriptor", () => {
    expect(limitsFor(basic, "foo_domain", [d(["key2", "x"]), d(["key3", "y"])])).toEqual([
      undefined,
      undefined,
    ]);
  });

  it("gives one limit per descriptor, in order", () => {
    const limits = limitsFor(basic, "test-domain", [
      d(["key3", "a"]),
      d(["nope", "b"]),
      d(["key2", "value2"]),
    ]);
    expect(limits.map((l) => l?.requestsPerUnit)).toEqual([1, undefined, 30]);
  });
});

describe("shadow_mode (TestShadowModeConfig)", () => {
  table(load("valid/shadow.yaml"), "test-domain", [
    [
      "not on the default",
      d(["key1", "value1"], ["subkey1", "something"]),
      { shadowMode: false, requestsPerUnit: 5 },
    ],
    [
      "on the exact value",
      d(["key1", "value1"], ["subkey1", "subvalue1"]),
      { shadowMode: true, requestsPerUnit: 10 },
    ],
    ["on a default", d(["key2", "something"]), { shadowMode: true, requestsPerUnit: 20 }],
    ["not on its exact sibling", d(["key2", "value2"]), { shadowMode: false, requestsPerUnit: 30 }],
  ]);
});

describe("wildcards (TestWildcardConfig)", () => {
  const wildcard = load("valid/wildcard.yaml");
  table(wildcard, "test-domain", [
    ["a default", d(["noVal", "foo1"]), { statsKey: "test-domain.noVal" }],
    ["a trailing wildcard", d(["wild", "foo1"]), { statsKey: "test-domain.wild_foo*", requestsPerUnit: 20 }],
    ["a trailing wildcard, another value", d(["wild", "foo2"]), { statsKey: "test-domain.wild_foo*" }],
    [
      "a trailing wildcard matches the bare prefix",
      d(["wild", "foo"]),
      { statsKey: "test-domain.wild_foo*" },
    ],
    [
      "a nested wildcard",
      d(["nestedWild", "val1"], ["wild", "goo2"]),
      { statsKey: "test-domain.nestedWild_val1.wild_goo*" },
    ],
    ["a value the wildcard does not match", d(["wild", "bar"]), undefined],
    ["a plain value is no prefix", d(["noWild", "foo1"]), undefined],
    ["a middle wildcard", d(["midWild", "barab"]), { statsKey: "test-domain.midWild_bar*b" }],
    ["a middle wildcard, longer", d(["midWild", "bar123b"]), { statsKey: "test-domain.midWild_bar*b" }],
    ["a middle wildcard matching nothing", d(["midWild", "barb"]), { statsKey: "test-domain.midWild_bar*b" }],
    ["a middle wildcard, no suffix", d(["midWild", "bara"]), undefined],
    ["a middle wildcard, no prefix", d(["midWild", "xbarb"]), undefined],
    [
      "several wildcards",
      d(["multiWild", "foo123bar456baz"]),
      { statsKey: "test-domain.multiWild_foo*bar*baz" },
    ],
    ["several wildcards matching nothing", d(["multiWild", "foobarbaz"]), { requestsPerUnit: 10 }],
    ["several wildcards, a part missing", d(["multiWild", "foo123baz"]), undefined],
    ["several wildcards, no prefix", d(["multiWild", "bar456baz"]), undefined],
  ]);

  it("matches patterns as the reference's wildcardMatch", () => {
    const parts = (pattern: string) => pattern.split("*");
    expect(wildcardMatches(parts("a*a"), "a")).toBe(false); // the fixed parts may not overlap
    expect(wildcardMatches(parts("a*a"), "aa")).toBe(true);
    expect(wildcardMatches(parts("*"), "")).toBe(true);
    expect(wildcardMatches(parts("foo*bar*"), "fooXbarY")).toBe(true);
    expect(wildcardMatches(parts("x*ab*b"), "xabb")).toBe(true);
    expect(wildcardMatches(parts("x*ab*b"), "xbab")).toBe(false); // "ab" only where the suffix "b" is
    expect(wildcardMatches(parts("x*ab*b"), "xab1b")).toBe(true);
  });
});

describe("stats keys: detailed_metric and value_to_metric (TestDetailedMetric, TestValueToMetric_*)", () => {
  table(load("valid/detailed.yaml"), "nested", [
    [
      "detailed, a top-level request",
      d(["key-1", "value-1"]),
      { statsKey: "nested.key-1_value-1", requestsPerUnit: 100 },
    ],
    ["not detailed, a top-level request", d(["plain-1", "value-1"]), { statsKey: "nested.plain-1" }],
    [
      "detailed, nested",
      d(["key-1", "value-1"], ["key-2", "value-2"]),
      { statsKey: "nested.key-1_value-1.key-2_value-2" },
    ],
    [
      "detailed, a value holding bytes that are not UTF-8: U+FFFD in their place, as a label prints",
      d(["key-1", "a\udcff\u00e9\u{1f600}"]),
      { statsKey: "nested.key-1_a\ufffd\u00e9\u{1f600}" },
    ],
    [
      "not detailed, nested",
      d(["plain-1", "value-1"], ["plain-2", "value-2"]),
      { statsKey: "nested.plain-1.plain-2" },
    ],
    [
      "detailed default beside an exact value",
      d(["key_1", "value-for-key-1"]),
      { statsKey: "nested.key_1_value-for-key-1" },
    ],
    [
      "the exact value",
      d(["key_1", "some-value-for-key-1"]),
      { statsKey: "nested.key_1_some-value-for-key-1" },
    ],
    [
      "detailed, a request shorter than the tree",
      d(["key_2", "key-2-value"]),
      { statsKey: "nested.key_2_key-2-value" },
    ],
    [
      "detailed, nested exact",
      d(["key_2", "key-2-value"], ["key_3", "requested-key3-value"]),
      { statsKey: "nested.key_2_key-2-value.key_3_requested-key3-value", requestsPerUnit: 5 },
    ],
    ["a nested default without rate_limit", d(["key_2", "key-2-value"], ["key_3", "other"]), undefined],
    [
      "value_to_metric on a wildcard: the request's value",
      d(["wild", "foo1"], ["other", "bar"]),
      { statsKey: "nested.wild_foo1.other" },
    ],
    [
      "value_to_metric on another level keeps the wildcard's pattern",
      d(["wild_plain", "foo1"], ["other", "bar"], ["limit", "X"]),
      { statsKey: "nested.wild_plain_foo*.other_bar.limit" },
    ],
  ]);

  table(load("valid/tollgate.yaml"), "shop", [
    [
      "value_to_metric on defaults",
      d(["route", "draw"], ["method", "GET"], ["subject", "123"]),
      { statsKey: "shop.route_draw.method_GET.subject" },
    ],
    [
      "value_to_metric with an empty value",
      d(["route", ""], ["method", "GET"], ["subject", "123"]),
      { statsKey: "shop.route.method_GET.subject" },
    ],
    [
      "an exact value keeps its value",
      d(["generic_key", "checkout"]),
      { statsKey: "shop.generic_key_checkout" },
    ],
  ]);
});

describe("share_threshold (TestShareThreshold)", () => {
  const share = load("valid/share.yaml");
  const limit = (...pairs: [string, string][]) => one(share, "test-domain", d(...pairs)) as RlsLimit;

  it("counts every value a wildcard matches together", () => {
    const a = limit(["files", "files/a.pdf"]);
    const b = limit(["files", "files/b.csv"]);
    expect(a).toMatchObject({ statsKey: "test-domain.files_files/*", sharedPatterns: ["files/*"] });
    expect(subjectOf("test-domain", d(["files", "files/a.pdf"]), a)).toBe(
      subjectOf("test-domain", d(["files", "files/b.csv"]), b),
    );
    // A request whose value is the pattern itself is matched by it and counted with the others.
    const literal = limit(["files", "files/*"]);
    expect(subjectOf("test-domain", d(["files", "files/*"]), literal)).toBe(
      subjectOf("test-domain", d(["files", "files/a.pdf"]), a),
    );
  });

  it.each([
    [
      [
        ["files", "top/x"],
        ["files", "nested/y"],
      ],
      "test-domain.files_top/*.files_nested/*",
      ["top/*", "nested/*"],
    ],
    [
      [
        ["route", "api/v1"],
        ["method", "GET"],
      ],
      "test-domain.route_api/*.method",
      ["api/*", undefined],
    ],
    [
      [
        ["service", "svc/user"],
        ["endpoint", "get"],
      ],
      "test-domain.service_svc/*.endpoint_get",
      ["svc/*", undefined],
    ],
    [
      [
        ["path", "path/foo"],
        ["file", "file/doc1"],
        ["type", "pdf"],
      ],
      "test-domain.path_path/*.file_file/*.type",
      ["path/*", undefined, undefined],
    ],
  ] as [[string, string][], string, (string | undefined)[]][])("%j", (pairs, statsKey, sharedPatterns) => {
    expect(limit(...pairs)).toMatchObject({ statsKey, sharedPatterns });
  });

  it("an exact value goes before a shared wildcard and counts alone", () => {
    expect(limit(["file", "test1"])).toMatchObject({
      requestsPerUnit: 50,
      statsKey: "test-domain.file_test1",
      sharedPatterns: [],
    });
    expect(limit(["file", "test2"])).toMatchObject({
      requestsPerUnit: 100,
      statsKey: "test-domain.file_test*",
    });
  });

  it("a wildcard without share_threshold counts each value apart", () => {
    const a = limit(["path", "path/foo"], ["file", "file/1"], ["type", "pdf"]);
    const b = limit(["path", "path/bar"], ["file", "file/2"], ["type", "pdf"]);
    const sa = subjectOf("test-domain", d(["path", "path/foo"], ["file", "file/1"], ["type", "pdf"]), a);
    const sb = subjectOf("test-domain", d(["path", "path/bar"], ["file", "file/2"], ["type", "pdf"]), b);
    expect(sa).toBe("rls:test-domain|path~path%2F%2A|file=file%2F1|type=pdf");
    expect(sb).toBe("rls:test-domain|path~path%2F%2A|file=file%2F2|type=pdf");
  });
});

describe("a descriptor's own limit (TestConfigLimitOverride)", () => {
  const basic = load("valid/basic.yaml");
  const overridden = (unit: RlsLimit["unit"], requestsPerUnit: number, ...pairs: [string, string][]) =>
    one(basic, "test-domain", { ...d(...pairs), limit: { unit, requestsPerUnit } });

  it("replaces the configured limit, with a stats key of the request's keys alone", () => {
    expect(overridden("day", 10, ["key1", "value1"], ["subkey1", "something"])).toMatchObject({
      requestsPerUnit: 10,
      unit: "day",
      windowMs: 86_400_000,
      algorithm: "fixed-window",
      name: undefined,
      shadowMode: false,
      unlimited: false,
      replaces: [],
      // The reference puts the request's values in this stats key; tollgate labels a metric with
      // it, so keys alone (docs/rls.md, "what differs").
      statsKey: "test-domain.key1.subkey1",
      source: "request",
    });
  });

  it("keeps its id when only the number changes, not when the unit does", () => {
    const day10 = overridden("day", 10, ["key1", "value1"], ["subkey1", "something"]);
    const day42 = overridden("day", 42, ["key1", "value1"], ["subkey1", "something"]);
    const hour42 = overridden("hour", 42, ["key1", "value1"], ["subkey1", "something"]);
    expect(day42?.id).toBe(day10?.id);
    expect(hour42?.id).not.toBe(day10?.id);
  });

  it("applies where the tree has no rule, and even on a white-listed value, as in the reference", () => {
    expect(overridden("minute", 3, ["nope", "x"])).toMatchObject({
      requestsPerUnit: 3,
      statsKey: "test-domain.nope",
    });
    expect(overridden("minute", 3, ["key2", "value3"])).toMatchObject({ requestsPerUnit: 3 });
    expect(overridden("minute", 3, ["key6", "x"])).toMatchObject({ unlimited: false, requestsPerUnit: 3 });
  });

  it("not in an unknown domain", () => {
    expect(
      limitsFor(basic, "foo_domain", [{ ...d(["a", "b"]), limit: { unit: "day", requestsPerUnit: 10 } }]),
    ).toEqual([undefined]);
  });
});

describe("replaces across the request (README Example 7, constructLimitsToCheck)", () => {
  const replaces = load("valid/replaces.yaml");
  const limits = (...descriptors: RequestDescriptor[]) =>
    limitsFor(replaces, "example7", descriptors).map((l) =>
      l === undefined ? null : l.unlimited ? "unlimited" : l.requestsPerUnit,
    );
  const specific = d(["key_1", "value_1"], ["user", "bkthomps"]);
  const replacing = d(["key_2", "value_2"], ["user", "bkthomps"]);

  it("each alone keeps its limit", () => {
    expect(limits(specific)).toEqual([5]);
    expect(limits(replacing)).toEqual([10]);
  });

  it("together, the replaced rule is dropped, whatever the order", () => {
    expect(limits(specific, replacing)).toEqual([null, 10]);
    expect(limits(replacing, specific)).toEqual([10, null]);
  });

  it("an unlimited rule replaces others, and is never replaced itself", () => {
    expect(limits(specific, d(["free", "x"]))).toEqual([null, "unlimited"]);
    expect(limits(d(["free", "x"]), d(["unfree", "y"]))).toEqual(["unlimited", 1]);
  });

  it("two rules that replace each other both go", () => {
    expect(limits(d(["ping", "a"]), d(["pong", "b"]))).toEqual([null, null]);
  });

  it("replaces only rules of the request (another request's are untouched)", () => {
    expect(limits(specific, d(["nope", "x"]))).toEqual([5, null]);
  });
});

describe("subjectOf", () => {
  const basic = load("valid/basic.yaml");
  const subject = (descriptor: RequestDescriptor, domain = "test-domain") => {
    const limit = one(basic, "test-domain", {
      ...descriptor,
      limit: { unit: "second", requestsPerUnit: 1 },
    }) as RlsLimit;
    return subjectOf(domain, descriptor, limit);
  };

  it("reads like the reference's key: the domain, then every entry's key and value", () => {
    expect(subject(d(["key1", "value1"], ["subkey1", "something"]))).toBe(
      "rls:test-domain|key1=value1|subkey1=something",
    );
    expect(subject(d(["remote_address", "50.0.0.1"]))).toBe("rls:test-domain|remote_address=50.0.0.1");
  });

  it("a key-only rule counts each value apart, as the reference", () => {
    const a = one(basic, "test-domain", d(["key2", "a"])) as RlsLimit;
    const b = one(basic, "test-domain", d(["key2", "b"])) as RlsLimit;
    expect(a.id).toBe(b.id);
    expect(subjectOf("test-domain", d(["key2", "a"]), a)).not.toBe(
      subjectOf("test-domain", d(["key2", "b"]), b),
    );
  });

  it("never joins two descriptors the reference's `_` joins", () => {
    expect(subject(d(["a", "b_c"]))).not.toBe(subject(d(["a_b", "c"])));
    expect(subject(d(["a", "b"], ["c", "d"]))).not.toBe(subject(d(["a", "b|c=d"])));
    expect(subject(d(["a", "b"]), "x|a=b")).not.toBe(subject(d(["a", "b"]), "x"));
  });

  it("keeps hash-tag and separator characters out of the parts", () => {
    const s = subject(d(["k{}:", "v|=~%* é"], ["lone", "\ud800x"]));
    expect(s).toBe("rls:test-domain|k%7B%7D%3A=v%7C%3D%7E%25%2A%20%C3%A9|lone=%ud800x");
    expect(s.slice(4)).not.toMatch(/[{}:]/);
  });

  it("never holds an API key: its hash stands in, apart for keys of one id, and stats show the id", () => {
    const { key } = newApiKey();
    const sameId = `${key.slice(0, 20)}${"A".repeat(43)}`;
    const s = subject(d(["api_key", key]));
    expect(s).not.toContain(key.slice(20));
    expect(s).toBe(`rls:test-domain|api_key=!${hashApiKey(key)}`);
    expect(subject(d(["api_key", sameId]))).not.toBe(s);
    // Not a key's shape: kept as it came (encoded), and no value encodes to a stand-in's "!".
    expect(subject(d(["api_key", `${key}x`]))).toBe(`rls:test-domain|api_key=${key}x`);
    expect(subject(d(["api_key", `!${hashApiKey(key)}`]))).not.toBe(s);
    const detailed = one(basic, "test-domain", d(["key7", key])) as RlsLimit;
    expect(detailed.statsKey).toBe(`test-domain.key7_${key.slice(0, 19)}`);
  });

  it("differs for any two different descriptors (property)", () => {
    const text = fc.string({
      unit: fc.constantFrom("a", "_", "|", "=", "~", "%", "*", "{", ":", "é", "\ud800"),
    });
    const descriptor = fc.array(fc.tuple(text, text), { minLength: 1, maxLength: 3 });
    fc.assert(
      fc.property(text, descriptor, text, descriptor, (domainA, a, domainB, b) => {
        const same = domainA === domainB && JSON.stringify(a) === JSON.stringify(b);
        expect(subject(d(...a), domainA) === subject(d(...b), domainB)).toBe(same);
      }),
      { numRuns: 2000 },
    );
  });

  it("encodes each part as it always has, character by character (store keys stay the same)", () => {
    /** The encoding's definition, one character at a time. */
    const byCharacter = (text: string): string => {
      let out = "";
      for (const char of text) {
        const code = char.codePointAt(0) ?? 0;
        if (/^[A-Za-z0-9._-]$/.test(char)) out += char;
        else if (code >= 0xd800 && code <= 0xdfff) out += `%u${code.toString(16)}`;
        else
          out += encodeURIComponent(char).replace(
            /[!'()*~]/g,
            (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`,
          );
      }
      return out;
    };
    const unit = fc.oneof(
      fc.constantFrom("a", "Z", "9", ".", "_", "-", " ", "!", "'", "(", ")", "*", "~", "%", "é", "😀"),
      fc.constantFrom("\ud800", "\udbff", "\udc00", "\udcff", "\udfff"),
      fc.string({ unit: "binary", maxLength: 2 }),
    );
    fc.assert(
      fc.property(fc.string({ unit, maxLength: 12 }), fc.string({ unit, maxLength: 12 }), (key, value) => {
        expect(subject(d([key, value]), value)).toBe(
          `rls:${byCharacter(value)}|${byCharacter(key)}=${byCharacter(value)}`,
        );
      }),
      { numRuns: 3000 },
    );
  });

  it("encodes a 4 MiB value in runs, not a character at a time", () => {
    const started = performance.now();
    expect(subject(d(["k", " ".repeat(4 * 1024 * 1024)]))).toHaveLength(
      "rls:test-domain|k=".length + 3 * 4 * 1024 * 1024,
    );
    // Whole runs take tens of milliseconds; a character at a time took seconds.
    expect(performance.now() - started).toBeLessThan(2000);
  });
});

describe("a folder of domains", () => {
  const runtime = load("runtime");
  table(runtime, "edge_proxy_per_ip", [
    ["the reference's Example 3: any address", d(["remote_address", "50.0.0.1"]), { requestsPerUnit: 10 }],
    [
      "the reference's Example 3: the black-listed address",
      d(["remote_address", "50.0.0.5"]),
      { requestsPerUnit: 0 },
    ],
  ]);
  table(runtime, "messaging", [
    [
      "the reference's Example 2: nested",
      d(["message_type", "marketing"], ["to_number", "2061111111"]),
      { requestsPerUnit: 5 },
    ],
    ["the reference's Example 2: top level", d(["to_number", "2061111111"]), { requestsPerUnit: 100 }],
  ]);
  it("keeps domains apart", () => {
    expect(one(runtime, "messaging", d(["remote_address", "50.0.0.1"]))).toBeUndefined();
  });
});

describe("describeRlsConfig", () => {
  it("shows every domain's tree as JSON", () => {
    const view = describeRlsConfig(load("runtime")) as {
      version: string;
      files: string[];
      domains: { domain: string; file: string; descriptors: unknown[] }[];
    };
    expect(JSON.parse(JSON.stringify(view))).toEqual(view);
    expect(view.files).toEqual(["config/messaging.yaml", "config/ratelimit.yaml"]);
    expect(view.domains.map((d) => d.domain)).toEqual(["edge_proxy_per_ip", "messaging"]);
    expect(view.domains[1]?.descriptors[0]).toMatchObject({
      key: "message_type",
      value: "marketing",
      line: 3,
      descriptors: [
        {
          key: "to_number",
          value: null,
          rateLimit: {
            unit: "day",
            requestsPerUnit: 5,
            windowMs: 86_400_000,
            algorithm: "fixed-window",
            name: null,
          },
        },
      ],
    });
  });
});
