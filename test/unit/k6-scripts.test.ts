// The k6 scripts parse on the oldest k6 the README names: before 0.52, k6 ran a script with imports
// through Babel 6, whose parser stops at ES2017 (no object spread, no optional catch binding, no `?.`).
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { parse } from "acorn";
import { describe, expect, it } from "vitest";

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
