// The README and docs/ against the code: every logged event, Redis key, metric and setting is documented in the
// docs/ file that holds its table, and nothing cites a missing document.
import { execFileSync } from "node:child_process";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { createMetrics } from "../../src/metrics/metrics.js";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const README = readFileSync(join(ROOT, "README.md"), "utf8");
/** A document of docs/, by its name there. */
const doc = (name: string): string => readFileSync(join(ROOT, "docs", name), "utf8");

function sourceFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? sourceFiles(path) : path.endsWith(".ts") ? [path] : [];
  });
}

/** The markdown table that follows `heading` in docs/`name`, as rows of cells. */
function tableAfter(name: string, heading: string): string[][] {
  const text = `\n${doc(name)}`;
  const start = text.indexOf(`\n${heading}\n`);
  if (start < 0) throw new Error(`docs/${name} has no "${heading}"`);
  const lines = text.slice(start).split("\n");
  const first = lines.findIndex((line) => line.startsWith("|"));
  const rows: string[][] = [];
  for (const line of lines.slice(first)) {
    if (!line.startsWith("|")) break;
    rows.push(
      line
        .split("|")
        .slice(1, -1)
        .map((cell) => cell.trim()),
    );
  }
  return rows.slice(2); // header and separator
}

const backticked = (cell: string): string[] => [...cell.matchAll(/`([^`]+)`/g)].map((m) => m[1] as string);

/** Every event name the code logs: the string literals of each `event:` property in src/. */
function loggedEvents(): Set<string> {
  const events = new Set<string>();
  for (const file of sourceFiles(join(ROOT, "src"))) {
    for (const match of readFileSync(file, "utf8").matchAll(/\bevent: ([^,}\n]+)/g)) {
      for (const name of (match[1] as string).matchAll(/"([a-z_]+)"/g)) events.add(name[1] as string);
    }
  }
  return events;
}

/**
 * The level each event is logged at: `logger.warn({ event: "x", …` or, for a throttled log,
 * `level: "warn", event: "x"`. An event logged at two levels gets both.
 */
function eventLevels(): Map<string, Set<string>> {
  const levels = new Map<string, Set<string>>();
  const call = /(?:\blogger\.(\w+)\(\s*\{\s*|\blevel: "(\w+)",\s*)event: ([^,}\n]+)/g;
  for (const file of sourceFiles(join(ROOT, "src"))) {
    for (const match of readFileSync(file, "utf8").matchAll(call)) {
      for (const name of (match[3] as string).matchAll(/"([a-z_]+)"/g)) {
        const seen = levels.get(name[1] as string) ?? new Set<string>();
        seen.add((match[1] ?? match[2]) as string);
        levels.set(name[1] as string, seen);
      }
    }
  }
  return levels;
}

describe("the README and docs/", () => {
  it("lists in its events table exactly the events the code logs", () => {
    const documented = new Set(
      tableAfter("operations.md", "## Logs").flatMap((row) => backticked(row[0] ?? "")),
    );
    const logged = loggedEvents();
    expect(logged.size).toBeGreaterThan(20); // the scan finds them
    expect([...logged].filter((e) => !documented.has(e)).sort()).toEqual([]);
    expect([...documented].filter((e) => !logged.has(e)).sort()).toEqual([]);
  });

  it("gives each event in its events table the level the code logs it at", () => {
    const levels = eventLevels();
    // Every logged event was found with its level, so none escapes the comparison below.
    expect([...loggedEvents()].filter((e) => !levels.has(e)).sort()).toEqual([]);
    const wrong: string[] = [];
    for (const row of tableAfter("operations.md", "## Logs")) {
      const events = backticked(row[0] ?? "");
      // "info · warn" gives one level per event; a single level covers every event of the row.
      const documented = (row[1] ?? "").split("·").map((level) => level.trim());
      for (const [i, event] of events.entries()) {
        const level = (documented.length === 1 ? documented[0] : documented[i]) ?? "";
        // "warn/info": an event the code logs at either level, as the row's text explains.
        const logged = [...(levels.get(event) ?? [])].sort();
        if (logged.join("/") !== level.split("/").sort().join("/"))
          wrong.push(`${event}: docs ${level}, code ${logged.join("/") || "none"}`);
      }
    }
    expect(wrong).toEqual([]);
  });

  it("lists in its keys table every key shape the key builders write, and no other", () => {
    const source = readFileSync(join(ROOT, "src/store/redis/keys.ts"), "utf8");
    // `${prefix}{u:${userId}}:user` → /^\{u:.+\}:user$/
    const builders = [...source.matchAll(/`\$\{prefix\}([^`]+)`/g)].map((m) => m[1] as string);
    expect(builders.length).toBeGreaterThanOrEqual(6);
    const patterns = builders.map(
      (shape) =>
        new RegExp(
          `^${shape
            .split(/\$\{[^}]+\}/)
            .map((part) => part.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"))
            .join(".+")}$`,
        ),
    );
    const documented = tableAfter("redis-keys.md", "# Redis keys").map(
      (row) => backticked(row[0] ?? "")[0] ?? "",
    );
    for (const key of documented) {
      expect(
        patterns.some((p) => p.test(key)),
        `${key} is in docs/redis-keys.md but no key builder makes it`,
      ).toBe(true);
    }
    for (const [i, pattern] of patterns.entries()) {
      expect(
        documented.some((key) => pattern.test(key)),
        `${builders[i]} is written but not in docs/redis-keys.md`,
      ).toBe(true);
    }
  });

  it("lists in its metrics table exactly the metrics tollgate registers, with their types and labels", async () => {
    const metrics = createMetrics();
    // The lean histogram shows its label only in its samples.
    metrics.checkDuration.labels("envoy").observe(0.001);
    const registered = new Map<string, { type: string; labels: string[] }>();
    type Registered = {
      name: string;
      type: string;
      labelNames?: string[];
      get(): Promise<{ values: { labels: Record<string, unknown> }[] }>;
    };
    for (const metric of metrics.registry.getMetricsAsArray() as unknown as Registered[]) {
      const sampled = (await metric.get()).values.flatMap((v) => Object.keys(v.labels));
      const labels = metric.labelNames ?? sampled;
      registered.set(metric.name, {
        type: metric.type,
        labels: [...new Set(labels)].filter((l) => l !== "le").sort(),
      });
    }
    const rows = tableAfter("operations.md", "## Metrics (`GET /metrics` on `ADMIN_PORT`)");
    const documented = new Map(
      rows.flatMap((row) => backticked(row[0] ?? "").map((name) => [name, row] as const)),
    );
    // prom-client's default metrics are one row of wildcards; every tollgate_ metric has its own.
    const wildcards = [...documented.keys()].filter((name) => name.endsWith("*"));
    const covered = (name: string) =>
      documented.has(name) || wildcards.some((w) => name.startsWith(w.slice(0, -1)));
    expect(registered.size).toBeGreaterThan(8); // the default metrics are there too
    expect([...registered.keys()].filter((name) => !covered(name)).sort()).toEqual([]);
    const ours = [...registered.keys()].filter((name) => name.startsWith("tollgate_")).sort();
    expect([...documented.keys()].filter((name) => !name.endsWith("*")).sort()).toEqual(ours);
    for (const name of ours) {
      const row = documented.get(name) as string[];
      const { type, labels } = registered.get(name) as { type: string; labels: string[] };
      expect((row[1] ?? "").split(",")[0], `${name}: type`).toBe(type);
      // The label names, without the values named in parentheses after each.
      const names = backticked((row[2] ?? "").replace(/\([^)]*\)/g, ""));
      expect(names.sort(), `${name}: labels`).toEqual(labels);
    }
  });

  it("names in its metrics table every reason and category a decision is counted with", () => {
    const source = readFileSync(join(ROOT, "src/metrics/check-observer.ts"), "utf8");
    const values = (label: string) =>
      new Set(
        [...source.matchAll(new RegExp(`\\b${label}: ([^,}\\n]+)`, "g"))].flatMap((m) =>
          [...(m[1] as string).matchAll(/"([a-z_]+)"/g)].map((v) => v[1] as string),
        ),
      );
    const row = tableAfter("operations.md", "## Metrics (`GET /metrics` on `ADMIN_PORT`)").find((r) =>
      (r[0] ?? "").includes("tollgate_decisions_total"),
    );
    const labels = row?.[2] ?? "";
    /** The values a label's cell lists: `reason` (ok, rate_limited, …). */
    const listed = (label: string) =>
      new Set(
        (new RegExp(`\`${label}\` \\(([^)]*)\\)`).exec(labels)?.[1] ?? "")
          .split(",")
          .map((v) => v.trim().replace(/^"|"$/g, "")),
      );
    const reasons = values("reason");
    expect(reasons.size).toBeGreaterThan(5); // the scan finds them
    expect([...reasons].filter((r) => !listed("reason").has(r)).sort()).toEqual([]);
    // Categories come from the policy; the one the code adds for checks that reach no window is named.
    expect([...values("category")].filter((c) => !labels.includes(`"${c}"`)).sort()).toEqual([]);
  });

  it("settings table and .env.example cover every variable the code reads", () => {
    // Every file of src/config: settings are read in env.ts and in the files it hands a reader to.
    const env = readdirSync(join(ROOT, "src/config"))
      .filter((file) => file.endsWith(".ts"))
      .map((file) => readFileSync(join(ROOT, "src/config", file), "utf8"))
      .join("\n");
    const read = new Set(
      [...env.matchAll(/\.(?:raw|int|port|host|oneOf|secret|file)(?:<\w+>)?\("([A-Z][A-Z0-9_]+)"/g)].map(
        (m) => m[1] as string,
      ),
    );
    expect(read.size).toBeGreaterThan(20); // the scan finds them
    const main = readFileSync(join(ROOT, "src/main.ts"), "utf8");
    for (const m of main.matchAll(/process\.env\.([A-Z_]+)/g)) read.add(m[1] as string);
    const settings = new Set(
      tableAfter("settings.md", "# Settings").flatMap((row) => row.flatMap(backticked)),
    );
    const example = readFileSync(join(ROOT, ".env.example"), "utf8");
    for (const name of read) {
      expect(settings.has(name), `${name} in the docs/settings.md table`).toBe(true);
      if (name !== "ENV_FILE")
        expect(example, `${name} in .env.example`).toMatch(new RegExp(`^#? ?${name}=`, "m"));
    }
  });

  it("names in its settings table (and .env.example) only variables tollgate knows, so that none is warned about as unknown", async () => {
    const { SETTINGS } = await import("../../src/config/setting-names.js");
    const known = new Set<string>(SETTINGS);
    const documented = tableAfter("settings.md", "# Settings").flatMap((row) => backticked(row[0] ?? ""));
    expect(documented.length).toBeGreaterThan(30); // the scan finds them
    expect(documented.filter((name) => !known.has(name))).toEqual([]);
    // `cp .env.example .env` sets only settings.
    const example = readFileSync(join(ROOT, ".env.example"), "utf8");
    const listed = [...example.matchAll(/^#? ?([A-Z][A-Z0-9_]+)=/gm)].map((m) => m[1] as string);
    expect(listed.length).toBeGreaterThan(30);
    expect(listed.filter((name) => !known.has(name))).toEqual([]);
    // Variables read outside env.ts's Reader, which only takes names from the list.
    const read = [...sourceFiles(join(ROOT, "src")), ...sourceFiles(join(ROOT, "upstream"))].flatMap((file) =>
      [...readFileSync(file, "utf8").matchAll(/process\.env\.([A-Z_]+)/g)].map((m) => m[1] as string),
    );
    expect(read.length).toBeGreaterThan(2);
    expect(read.filter((name) => !known.has(name))).toEqual([]);
  });
});

/** Every text file git tracks (package-lock.json and images aside), split into lines. */
function trackedTexts(): { file: string; lines: string[] }[] {
  const files = execFileSync("git", ["ls-files"], { cwd: ROOT, encoding: "utf8" })
    .split("\n")
    .filter((f) => f !== "" && !f.endsWith("package-lock.json") && !/\.(png|ico)$/.test(f));
  return files.flatMap((file) => {
    try {
      return [{ file, lines: readFileSync(join(ROOT, file), "utf8").split("\n") }];
    } catch {
      return []; // deleted in the work tree, not yet in git
    }
  });
}

describe("the repository", () => {
  it("cites no document it does not contain (code comments included)", () => {
    const offending: string[] = [];
    for (const { file, lines } of trackedTexts()) {
      for (const [i, line] of lines.entries()) {
        // A section sign is fine only where it points into docs/envoy-notes.md, which is here.
        const section =
          line.includes("§") && file !== "docs/envoy-notes.md" && !line.includes("envoy-notes.md");
        if (/\bSPEC\b/.test(line) || /\bissue \d+/i.test(line) || section)
          offending.push(`${file}:${i + 1}: ${line.trim()}`);
      }
    }
    expect(offending).toEqual([]);
  });

  it("names only repository files that exist (code comments included)", () => {
    // A path into one of the repository's own folders; dist/… and k6's module names are not such paths.
    const cited =
      /(?<![\w./-])((?:\.ci|src|test|scripts|nginx|bench|docs|envoy|upstream|prometheus)\/[\w./-]*\.(?:ts|mts|mjs|js|md|ya?ml|conf|template|lua|json))\b/g;
    const exists = (path: string): boolean => {
      try {
        statSync(join(ROOT, path));
        return true;
      } catch {
        return false;
      }
    };
    const missing: string[] = [];
    let seen = 0;
    for (const { file, lines } of trackedTexts()) {
      for (const [i, line] of lines.entries()) {
        for (const match of line.matchAll(cited)) {
          const path = match[1] as string;
          seen += 1;
          // Written by a run, not kept in the repository; a compiled name stands for its source.
          if (path.startsWith("bench/results/")) continue;
          if (exists(path) || exists(path.replace(/\.js$/, ".ts"))) continue;
          missing.push(`${file}:${i + 1}: ${path}`);
        }
      }
    }
    expect(seen).toBeGreaterThan(50); // the scan finds them
    expect(missing).toEqual([]);
  });

  it("links from the README only to files that exist", () => {
    const links = [...README.matchAll(/\]\(([^)#]+)\)/g)]
      .map((m) => m[1] as string)
      .filter((l) => !/^https?:/.test(l));
    for (const link of links) expect(() => statSync(join(ROOT, link)), link).not.toThrow();
    expect(links).toContain("bench/README.md");
  });

  it("links from the README and docs/ only to files, and headings in them, that exist", () => {
    /** A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces as hyphens. */
    const slug = (heading: string): string =>
      heading
        .trim()
        .toLowerCase()
        .replace(/[^\p{L}\p{N}\s_-]/gu, "")
        .replace(/\s/g, "-");
    const anchors = (file: string): Set<string> => {
      const found = new Set<string>();
      let fenced = false;
      for (const line of readFileSync(join(ROOT, file), "utf8").split("\n")) {
        if (line.startsWith("```")) fenced = !fenced;
        const heading = /^#+ (.*)$/.exec(line);
        if (!fenced && heading) found.add(slug(heading[1] as string));
      }
      return found;
    };
    const documents = [
      "README.md",
      ...readdirSync(join(ROOT, "docs"))
        .filter((name) => name.endsWith(".md"))
        .map((name) => `docs/${name}`),
    ];
    const broken: string[] = [];
    let seen = 0;
    for (const document of documents) {
      const text = readFileSync(join(ROOT, document), "utf8");
      for (const match of text.matchAll(/\]\(([^)\s]+)\)/g)) {
        const link = match[1] as string;
        if (/^https?:/.test(link)) continue;
        seen += 1;
        const [path = "", anchor] = link.split("#");
        const target = path === "" ? document : join(dirname(document), path);
        try {
          statSync(join(ROOT, target));
        } catch {
          broken.push(`${document}: ${link}`);
          continue;
        }
        if (anchor !== undefined && !anchors(target).has(anchor)) broken.push(`${document}: ${link}`);
      }
    }
    expect(seen).toBeGreaterThan(20); // the scan finds them
    expect(broken).toEqual([]);
  });
});
