// The k6 scripts parse on the oldest k6 the README names: before 0.52, k6 ran a script with imports
// through Babel 6, whose parser stops at ES2017 (no object spread, no optional catch binding, no `?.`).
// No k6 runs here, so what they ask and expect is held to the source: routes that exist, the demo
// users' tiers and the built-in policy's limits, thresholds a default run can meet.
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { parse } from "acorn";
import { describe, expect, it } from "vitest";
import { demoUsers } from "../../src/auth/users-file.js";
import { DEFAULT_POLICY_YAML, parsePolicy } from "../../src/policy/policy.js";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const K6 = join(ROOT, "k6");
/** The newest syntax Babel 6 parses, which k6 before 0.52 ran every script with imports through. */
const ECMA_VERSION = 2017;
const MINIMUM_K6 = "0.45";

/** Why `source` would not parse on that k6, or undefined when it would. */
function syntaxProblem(source: string): string | undefined {
  try {
    parse(source, { ecmaVersion: ECMA_VERSION, sourceType: "module" });
    return undefined;
  } catch (error) {
    return (error as Error).message;
  }
}

describe("the k6 scripts", () => {
  const scripts = readdirSync(K6).filter((name) => name.endsWith(".js"));

  it("use no syntax newer than ES2017, so that k6 0.45 to 0.51 can parse them", () => {
    expect(scripts.length).toBeGreaterThanOrEqual(5);
    const problems = scripts.flatMap((name) => {
      const problem = syntaxProblem(readFileSync(join(K6, name), "utf8"));
      return problem === undefined ? [] : [`k6/${name}: ${problem}`];
    });
    expect(problems).toEqual([]);
  });

  it("would be refused with the syntax that older k6 cannot parse", () => {
    for (const newer of [
      "const a = { ...b };",
      "try { f(); } catch { g(); }",
      "const a = b?.c;",
      "const a = b ?? c;",
      "a ||= b;",
      "const n = 1_000;",
      "class A { x = 1; }",
      "/(?<name>x)/;",
    ]) {
      expect(syntaxProblem(newer), newer).toBeDefined();
    }
    // What the scripts may use: ES2017, trailing commas in calls included.
    expect(syntaxProblem("async function f(a, b,) { await g(...a,); return a ** 2; }")).toBeUndefined();
  });

  it("have their minimum k6 version stated where the README first names k6", () => {
    const readme = readFileSync(join(ROOT, "README.md"), "utf8");
    const first = readme.split("\n").find((line) => /\bk6\b/.test(line)) ?? "";
    expect(first).toContain(`k6 ${MINIMUM_K6} or later`);
  });
});

/** The requests a script makes: method, the service it targets (BASE_URL or ADMIN_URL) and the path. */
function requestsOf(source: string) {
  const calls = source.matchAll(/http\.(get|post|put|patch|del)\(\s*`\$\{(BASE_URL|ADMIN_URL)\}([^`?]*)/g);
  return [...calls].map(([, method, base, path]) => ({
    method: (method === "del" ? "delete" : String(method)).toUpperCase(),
    base: String(base),
    // A value put in the path (an id) stands for one path segment.
    path: String(path).replace(/\$\{[^}]+\}/g, "x"),
  }));
}

/** The routes an Express router or app of `file` declares (`router.get("/p", …)`), below `mount`. */
function routesOf(file: string, receiver: string, mount = "") {
  const source = readFileSync(join(ROOT, file), "utf8");
  const declared = source.matchAll(
    new RegExp(`${receiver}\\.(get|post|put|patch|delete)\\(\\s*"([^"]+)"`, "g"),
  );
  return [...declared].map(([, method, path]) => ({
    method: String(method).toUpperCase(),
    pattern: new RegExp(`^${mount}${String(path).replace(/:\w+/g, "[^/]+")}$`),
  }));
}

describe("what the k6 scripts ask and expect", () => {
  const scripts = readdirSync(K6).filter((name) => name.endsWith(".js"));
  const source = (name: string) => readFileSync(join(K6, name), "utf8");
  const policy = parsePolicy(DEFAULT_POLICY_YAML, "built-in policy");
  /** The built-in policy's limit and window (in seconds) of a tier's category. */
  const limitOf = (tier: string, category: string) => {
    const window = policy.tiers.get(tier)?.get(category)?.windows[0];
    return { limit: window?.limit, seconds: (window?.windowMs ?? 0) / 1000 };
  };
  const tierOf = (username: string) => demoUsers().find((u) => u.username === username)?.tier;

  it("ask only for routes that exist: tollgate's public and admin APIs, the demo upstream behind the proxy", () => {
    const publicRoutes = routesOf("src/http/public-api.ts", "router");
    const adminRoutes = readdirSync(join(ROOT, "src/http"))
      .filter((name) => /^admin-.*\.ts$/.test(name))
      .flatMap((name) => routesOf(`src/http/${name}`, "admin", "/admin"));
    const upstreamRoutes = routesOf("upstream/app.ts", "app");
    const requests = scripts.flatMap((name) => requestsOf(source(name)).map((r) => ({ ...r, name })));
    expect(requests.length).toBeGreaterThanOrEqual(10);
    for (const { method, base, path, name } of requests) {
      const routes =
        base === "ADMIN_URL" ? adminRoutes : path.startsWith("/api/") ? upstreamRoutes : publicRoutes;
      const found = routes.some((r) => r.method === method && r.pattern.test(path));
      expect(found, `${name}: ${method} ${base}${path}`).toBe(true);
    }
  });

  it("expect the demo users' tiers and the built-in policy's limits", () => {
    const tiers = /const USERS = (\[[\s\S]*?\]);/.exec(source("tiers.js"))?.[1] ?? "[]";
    const users = Function(`return ${tiers}`)() as {
      username: string;
      tier: string;
      limits: Record<string, number>;
    }[];
    expect(users.length).toBe(3);
    for (const user of users) {
      expect(tierOf(user.username), user.username).toBe(user.tier);
      for (const [category, limit] of Object.entries(user.limits))
        expect(limit, `${user.username} ${category}`).toBe(limitOf(user.tier, category).limit);
    }
    // smoke.js logs in as alice and reads her general limit and window.
    const free = limitOf(String(tierOf("alice")), "general");
    expect(source("smoke.js")).toContain(`X-RateLimit-Limit is ${free.limit} (free, general)`);
    expect(source("smoke.js")).toContain(`"free-general";q=${free.limit};w=${free.seconds}`);
  });

  it("set thresholds the built-in policy can meet: atomicity's allowed count, load's volume", () => {
    // atomicity.js creates a free user (or uses alice): exactly her general limit passes a burst.
    const atomicity = source("atomicity.js");
    expect(atomicity).toContain('tier: "free"');
    const expected = Number(/EXPECTED_ALLOWED \|\| (\d+)/.exec(atomicity)?.[1]);
    const burst = Number(/BURST \|\| (\d+)/.exec(atomicity)?.[1]);
    expect(expected).toBe(limitOf("free", "general").limit);
    expect(burst).toBeGreaterThan(expected);
    // load.js: one default run as ent_carol stays inside her general hour, so it measures allowed checks.
    const load = source("load.js");
    expect(load).toContain('login("ent_carol"');
    const rate = Number(/RATE \|\| (\d+)/.exec(load)?.[1]);
    const duration = Number(/DURATION \|\| "(\d+)s"/.exec(load)?.[1]);
    const enterprise = limitOf(String(tierOf("ent_carol")), "general");
    expect(rate * duration).toBeLessThanOrEqual(Number(enterprise.limit));
    expect(duration).toBeLessThanOrEqual(enterprise.seconds);
  });
});
