// The policy file: the built-in default, route matching, and one fixture per kind of error.
import { describe, expect, it } from "vitest";
import { parseLimit } from "../../src/config/rules.js";
import { loadPolicy, PolicyError } from "../../src/policy/policy.js";
import { matchRoute, normalizePath } from "../../src/policy/routes.js";

const fixture = (name: string) => new URL(`../fixtures/policy/${name}`, import.meta.url).pathname;

function problemsOf(file: string): string[] {
  try {
    loadPolicy(fixture(file));
  } catch (error) {
    if (error instanceof PolicyError) return error.problems;
    throw error;
  }
  throw new Error(`${file} was accepted`);
}

describe("the built-in policy", () => {
  const policy = loadPolicy(undefined);

  it("holds the limits of the specification", () => {
    const limit = (tier: string, category: string) => policy.tiers.get(tier)?.get(category);
    const log = (limit: number, windowMs: number) => ({
      algorithm: "sliding-log",
      windows: [{ limit, windowMs }],
    });
    expect(limit("anonymous", "login")).toEqual(log(10, 15 * 60_000));
    expect(limit("free", "search")).toEqual(log(20, 3_600_000));
    expect(limit("pro", "orders")).toEqual(log(100, 3_600_000));
    expect(limit("enterprise", "general")).toEqual(log(10_000, 3_600_000));
    for (const tier of ["anonymous", "free", "pro", "enterprise"])
      expect(limit(tier, "account")).toEqual(log(300, 3_600_000));
    expect(policy.categories).toEqual(["general", "search", "orders", "login", "account"]);
    expect(policy.ip).toBeUndefined();
    expect([...policy.modes.values()]).toEqual(["enforce", "enforce", "enforce", "enforce"]);
  });

  it("maps the specified routes to their categories and token rules", () => {
    const match = (method: string, path: string) => matchRoute(policy, method, normalizePath(path));
    expect(match("GET", "/api/products")).toMatchObject({ category: "general", token: "required" });
    expect(match("GET", "/api/search?q=x")).toMatchObject({ category: "search", token: "required" });
    expect(match("POST", "/api/orders")).toMatchObject({ category: "orders", token: "required" });
    expect(match("POST", "/auth/login")).toMatchObject({ category: "login", token: "none" });
    expect(match("GET", "/health")).toMatchObject({ limited: false, token: "none" });
    expect(match("GET", "/ready")).toMatchObject({ limited: false, token: "none" });
    expect(match("GET", "/api/orders")).toMatchObject({ category: "general", token: "required" });
    for (const path of [
      "/auth/logout",
      "/auth/logout-all",
      "/auth/sessions",
      "/auth/sessions/abc/revoke",
      "/me",
    ]) {
      expect(match(path === "/auth/sessions" || path === "/me" ? "GET" : "POST", path), path).toMatchObject({
        category: "account",
        token: "required",
      });
    }
    expect(match("DELETE", "/anything/else")).toMatchObject({ category: "general", token: "required" });
    expect(match("GET", "/auth/login")).toMatchObject({ category: "general", token: "required" });
  });

  it("sees through spellings that an upstream treats as the same path", () => {
    const match = (method: string, path: string) => matchRoute(policy, method, normalizePath(path));
    for (const path of ["/api/search/", "/api//search", "/API/Search", "/api/%73earch", "/api/search?x=/y"]) {
      expect(match("GET", path), path).toMatchObject({ category: "search" });
    }
    expect(match("HEAD", "/api/search")).toMatchObject({ category: "search" });
    expect(normalizePath("/api/A%40b")).toBe("/api/a%40b");
  });
});

describe("a path with a format suffix", () => {
  const policy = loadPolicy(undefined);
  const match = (method: string, path: string) => matchRoute(policy, method, normalizePath(path));

  it("is charged as the route an upstream serves it by (Rails, Spring MVC, Django REST framework)", () => {
    expect(match("GET", "/api/search.json?q=x")).toMatchObject({ category: "search", token: "required" });
    expect(match("GET", "/api/Search.XML")).toMatchObject({ category: "search" });
    expect(match("HEAD", "/api/search.json")).toMatchObject({ category: "search" });
    expect(match("GET", "/api/search.json.xml")).toMatchObject({ category: "search" });
    expect(match("POST", "/api/orders.json")).toMatchObject({ category: "orders" });
    expect(match("GET", "/auth/sessions.json")).toMatchObject({ category: "account" });
    // The method still decides: a GET of the orders route's suffixed path is no order.
    expect(match("GET", "/api/orders.json")).toMatchObject({ category: "general" });
  });

  it("never opens a route the default guards: an unlimited or tokenless stem leaves it to the default", () => {
    expect(match("GET", "/health.json")).toMatchObject({
      category: "general",
      token: "required",
      limited: true,
    });
    expect(match("POST", "/auth/login.json")).toMatchObject({ category: "general", token: "required" });
  });

  it("takes a prefix route's own path too, and reads a dot only in the last segment, after a name", () => {
    const policy = loadPolicy(fixture("valid.json"));
    expect(matchRoute(policy, "GET", "/reports.csv")).toMatchObject({ category: "reports" });
    expect(matchRoute(policy, "GET", "/public.json")).toMatchObject({ category: "general", limited: true });
    expect(matchRoute(policy, "GET", "/api/.json")).toMatchObject({ category: "general" });
    expect(matchRoute(policy, "GET", "/reports.d/x")).toMatchObject({ category: "general" });
  });
});

describe("a policy file", () => {
  it("reads JSON with prefix routes, unlimited routes and custom tiers", () => {
    const policy = loadPolicy(fixture("valid.json"));
    expect(matchRoute(policy, "GET", "/reports/2024/q1")).toMatchObject({ category: "reports" });
    expect(matchRoute(policy, "GET", "/reports")).toMatchObject({ category: "reports" });
    expect(matchRoute(policy, "GET", "/reportsx")).toMatchObject({ category: "general" });
    expect(matchRoute(policy, "GET", "/public/a")).toMatchObject({ limited: false, token: "none" });
    expect(policy.tiers.get("gold")?.get("reports")).toEqual({
      algorithm: "sliding-log",
      windows: [{ limit: 2, windowMs: 86_400_000 }],
    });
  });

  it("reads layers, lists of windows, algorithms and modes", () => {
    const policy = loadPolicy(fixture("layered.yaml"));
    expect(policy.ip).toEqual({
      algorithm: "sliding-log",
      windows: [
        { limit: 20, windowMs: 1_000 },
        { limit: 600, windowMs: 60_000 },
      ],
    });
    // Windows come sorted, shortest first; a category's algorithm wins over its tier's.
    expect(policy.tiers.get("free")?.get("general")).toEqual({
      algorithm: "sliding-log",
      windows: [
        { limit: 5, windowMs: 1_000 },
        { limit: 100, windowMs: 3_600_000 },
      ],
    });
    expect(policy.tiers.get("free")?.get("search")).toMatchObject({ algorithm: "gcra" });
    expect(policy.tiers.get("enterprise")?.get("general")).toMatchObject({ algorithm: "sliding-counter" });
    expect(policy.tiers.get("enterprise")?.has("algorithm")).toBe(false);
    expect(Object.fromEntries(policy.modes)).toEqual({
      anonymous: "enforce",
      free: "enforce",
      enterprise: "shadow",
    });
  });

  it.each([
    [
      "bad-algorithm.yaml",
      /tiers\.enterprise\.algorithm: algorithm must be one of sliding-log, sliding-counter, gcra/,
    ],
    ["same-window-twice.yaml", /tiers\.free\.general: two limits over the same 1s window/],
    ["too-many-windows.yaml", /tiers\.anonymous\.general: give 1 to 4 limits/],
    ["ip-as-category.yaml", /routes\[0\]\.category: "ip" is the per-address layer's name/],
    ["bad-ip-layer.yaml", /ip: unknown key "burst"/],
    ["bad-list-entry.yaml", /tiers\.anonymous\.general\[1\]: bad limit "5 a second"/],
    ["bad-mode.yaml", /mode: mode must be enforce or shadow/],
    // A name every object has: the tiers' lookups would find Object.prototype's, not a rule.
    ["reserved-name.yaml", /routes\[0\]\.category: this name is reserved/],
    // "Authenticated but unlimited" cannot be: an unlimited route is answered before any token is read.
    ["unlimited-with-token.yaml", /routes\[0\]\.limit: limit: false lets every request through unread/],
    // A HEAD route could never match: HEAD requests are limited as GET.
    ["head-method.yaml", /routes\[0\]\.method: method HEAD: a HEAD request is limited by the GET routes/],
  ])("refuses %s, naming the field", (file, problem) => {
    expect(problemsOf(file)[0]).toMatch(problem);
    expect(problemsOf(file)).toHaveLength(1);
  });

  // A parser or zod drops or swallows these (a record's "__proto__" key sets the prototype of the
  // object built from it): a tier or category so named would vanish without a word.
  it.each([
    ["proto-top.yaml", [["__proto__", "__proto__"]]],
    ["proto-tier.yaml", [["tiers.__proto__", "__proto__"]]],
    ["proto-category.yaml", [["tiers.free.__proto__", "__proto__"]]],
    ["prototype-category.yaml", [["tiers.free.prototype", "prototype"]]],
    ["proto-in-route.yaml", [["routes[0].constructor", "constructor"]]],
    [
      "proto-tiers.json",
      [
        ["tiers.anonymous.__proto__", "__proto__"],
        ["tiers.__proto__", "__proto__"],
      ],
    ],
  ])("refuses the reserved keys of %s at any level, naming the file and each field", (file, found) => {
    expect(problemsOf(file)).toEqual(
      found.map(
        ([field, key]) =>
          `POLICY_FILE ${fixture(file)}: ${field}: reserved key "${key}": JavaScript objects treat it specially; rename or remove it`,
      ),
    );
  });

  it("names the file and the field of an unknown key in a route", () => {
    expect(problemsOf("unknown-key.yaml")).toEqual([
      `POLICY_FILE ${fixture("unknown-key.yaml")}: routes[0]: unknown key "burst"`,
    ]);
  });

  it("names an unknown top-level key", () => {
    expect(problemsOf("unknown-top-key.yaml")[0]).toMatch(/unknown-top-key\.yaml: unknown key "limits"$/);
  });

  it("rejects a limit that is not <count>/<duration>", () => {
    expect(problemsOf("bad-limit.yaml")[0]).toMatch(
      /bad-limit\.yaml: tiers\.free\.general: bad limit "100 per hour"/,
    );
  });

  it("rejects a zero count", () => {
    expect(problemsOf("zero-limit.yaml")[0]).toMatch(/tiers\.anonymous\.general: bad limit "0\/1h"/);
  });

  it("rejects a category that a route reaches but a tier lacks", () => {
    expect(problemsOf("missing-category.yaml")).toEqual([
      `POLICY_FILE ${fixture("missing-category.yaml")}: tiers.free.search: missing, but routes[0] can send free users to category "search"`,
    ]);
  });

  it("rejects a category that anonymous requests reach but the anonymous tier lacks", () => {
    expect(problemsOf("reports-unreachable-by-anonymous.json")[0]).toMatch(
      /tiers\.anonymous\.reports: missing, but routes\[0\] can send anonymous requests/,
    );
  });

  it("requires the anonymous tier", () => {
    expect(problemsOf("missing-anonymous.yaml")[0]).toMatch(/tiers\.anonymous: required/);
  });

  it("rejects an unknown method", () => {
    expect(problemsOf("bad-method.yaml")[0]).toMatch(/routes\[0\]\.method: method must be one of/);
  });

  it("reports a file that is not YAML or JSON", () => {
    expect(problemsOf("not-yaml.yaml")[0]).toMatch(/not-yaml\.yaml: not valid YAML or JSON/);
  });

  it("reports where a file stops being YAML by line and column, in a message that ends there", () => {
    expect(problemsOf("bad-indentation.yaml")).toEqual([
      `POLICY_FILE ${fixture("bad-indentation.yaml")}: not valid YAML or JSON: All mapping items must start at the same column (line 3, column 1)`,
    ]);
    expect(problemsOf("not-yaml.yaml")[0]).toMatch(/\(line 2, column 1\)$/);
  });

  it("reports a file that cannot be read", () => {
    expect(problemsOf("does-not-exist.yaml")[0]).toMatch(/cannot read the file \(ENOENT\)/);
  });
});

describe("limits", () => {
  it("parse counts and durations in s, m, h and d", () => {
    expect(parseLimit("10/15m")).toEqual({ limit: 10, windowMs: 900_000 });
    expect(parseLimit("1/1s")).toEqual({ limit: 1, windowMs: 1_000 });
    expect(parseLimit("5/2d")).toEqual({ limit: 5, windowMs: 172_800_000 });
    // A unit alone is one of it, as in "100/h".
    expect(parseLimit("100/h")).toEqual({ limit: 100, windowMs: 3_600_000 });
    expect(parseLimit("10/m")).toEqual(parseLimit("10/1m"));
    for (const bad of ["10", "10/", "/1h", "10/1w", "-1/1h", "10/0s", "1.5/1h", "10/8d", "10/hh", "h/1h"]) {
      expect(parseLimit(bad), bad).toBeUndefined();
    }
  });

  it("refuse the lenient forms of their numbers: spaces, signs, leading zeros, exponents, hex, huge counts", () => {
    for (const bad of [
      " 10/1h",
      "10/1h ",
      "10 /1h",
      "10/ 1h",
      "10/1 h",
      "\t10/1h\n",
      "+10/1h",
      "10/+1h",
      "010/1h",
      "10/01h",
      "00/1h",
      "1e3/1h",
      "0x10/1h",
      "10.0/1h",
      "10/1.0h",
      "１０/1h",
      "9999999999999999999999/1h",
      "10/9999999999999999999999s",
      "1000001/1h",
      "10/604801s",
      "10/1H",
    ]) {
      expect(parseLimit(bad), JSON.stringify(bad)).toBeUndefined();
    }
    // The edges that stay: the largest count, the longest window, and a unit alone (docs/policy.md).
    expect(parseLimit("1000000/604800s")).toEqual({ limit: 1_000_000, windowMs: 604_800_000 });
    expect(parseLimit("10/7d")).toEqual({ limit: 10, windowMs: 604_800_000 });
    expect(parseLimit("10/d")).toEqual({ limit: 10, windowMs: 86_400_000 });
  });
});
