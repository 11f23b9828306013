// Renders nginx.conf.template into a directory with its included files: for deployments and tests alike.
// Usage: node nginx/render.mjs --help
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { apiKeyHeaderProblem as headerProblem } from "../scripts/api-key-header.mjs";

const NGINX_DIR = fileURLToPath(new URL(".", import.meta.url));
const TEMPLATE = join(NGINX_DIR, "nginx.conf.template");
export const INCLUDED_FILES = ["tollgate-check.conf", "tollgate-limit-headers.conf", "tollgate-errors.conf"];
const DEFAULTS = {
  WORKERS: "auto",
  CHECK_TIMEOUT: "1s",
  API_KEY_HEADER: "x-api-key",
  API_KEY_FORWARD: "false",
};
const PLACEHOLDER = /\{\{([A-Z_]+)\}\}/g;
/**
 * Placeholders filled from others' values, never given (`from`: the values they are made of, which
 * a template using them takes): nginx reads a request header as the variable $http_<its name in
 * lower case, "-" as "_">.
 */
const apiKeyVariable = (values) => `http_${values.API_KEY_HEADER.toLowerCase().replaceAll("-", "_")}`;
const DERIVED = {
  API_KEY_VARIABLE: { from: ["API_KEY_HEADER"], derive: apiKeyVariable },
  // Before the directives that drop the API key header and `Authorization: ApiKey …` for the
  // upstream: nothing, or, with API_KEY_FORWARD=true (as tollgate's setting of that name), a comment
  // mark, so that nginx passes both as the client sent them.
  API_KEY_DROP: {
    from: ["API_KEY_FORWARD"],
    derive: (values) => (values.API_KEY_FORWARD === "true" ? "# API_KEY_FORWARD=true: " : ""),
  },
};
const BOOLEANS = ["API_KEY_FORWARD"];

/** Why API_KEY_HEADER's value cannot be used, or undefined. */
export function apiKeyHeaderProblem(value) {
  const problem = headerProblem(value);
  return problem === undefined ? undefined : `API_KEY_HEADER=${value} ${problem}`;
}

const HELP = `usage: node nginx/render.mjs OUT_DIR NAME=VALUE ...

Writes OUT_DIR/nginx.conf from nginx/nginx.conf.template, with tollgate-check.conf,
tollgate-limit-headers.conf and tollgate-errors.conf beside it, and prints the path of
nginx.conf. Nothing is written when a value is missing or empty or a name is unknown.

  LISTEN         address nginx listens on                 e.g. 0.0.0.0:80
  CHECK_ADDR     tollgate's CHECK_PORT                    e.g. 127.0.0.1:9191
  PUBLIC_ADDR    tollgate's PORT                          e.g. 127.0.0.1:8080
  UPSTREAM_ADDR  the application behind nginx             e.g. 127.0.0.1:8000
  PREFIX         directory for nginx's pid, error log and temp files (PREFIX/tmp must exist)
  WORKERS        worker_processes (default auto)
  CHECK_TIMEOUT  how long nginx waits for a check (default 1s; keep it above REDIS_TIMEOUT_MS)
  API_KEY_HEADER the header carrying an API key, as tollgate's API_KEY_HEADER (default: the
                 environment's API_KEY_HEADER, else x-api-key)
  API_KEY_FORWARD true: the upstream gets the API key too, as tollgate's API_KEY_FORWARD (default:
                 the environment's API_KEY_FORWARD, else false: the key header and
                 Authorization: ApiKey are dropped before the upstream)
`;

/** The placeholders a template uses that take a value, in order of first use. */
export function placeholders(template) {
  const names = [...template.matchAll(PLACEHOLDER)].flatMap((m) => DERIVED[m[1]]?.from ?? [m[1]]);
  return [...new Set(names)];
}

/** "true" or "false" read as tollgate reads its settings (any case, spaces around ignored), or undefined. */
function booleanValue(value) {
  const text = value.trim().toLowerCase();
  return text === "true" || text === "false" ? text : undefined;
}

/** Why a true/false value cannot be used, or undefined. */
function booleanProblem(name, value) {
  return booleanValue(value) === undefined ? `${name}=${value} is not true or false` : undefined;
}

/** Fills every {{NAME}} of `template`; throws one error naming every placeholder without a value. */
export function renderTemplate(template, values) {
  const given = { ...DEFAULTS, ...values };
  const missing = placeholders(template).filter((name) => given[name] === undefined);
  if (missing.length > 0) {
    throw new Error(`nginx template: no value for ${missing.map((name) => `${name}`).join(", ")}`);
  }
  const problem =
    apiKeyHeaderProblem(given.API_KEY_HEADER) ??
    BOOLEANS.map((name) => booleanProblem(name, given[name])).find((p) => p !== undefined);
  if (problem !== undefined) throw new Error(`nginx template: ${problem}`);
  for (const name of BOOLEANS) given[name] = booleanValue(given[name]);
  for (const [name, { derive }] of Object.entries(DERIVED)) given[name] = derive(given);
  return template.replace(PLACEHOLDER, (_, name) => given[name]);
}

/** The included files' text, rendered with the template's values: they take its placeholders too. */
function includedText() {
  return INCLUDED_FILES.map((file) => readFileSync(join(NGINX_DIR, file), "utf8")).join("\n");
}

/**
 * Writes OUT_DIR/nginx.conf from `template` (nginx/nginx.conf.template by default) and, for that
 * template, the files it includes; returns the path of nginx.conf. Renders before writing anything.
 */
export function writeNginxConfig({ dir, values, template = TEMPLATE }) {
  const rendered = renderTemplate(readFileSync(template, "utf8"), values);
  const included = INCLUDED_FILES.map((file) => [
    file,
    renderTemplate(readFileSync(join(NGINX_DIR, file), "utf8"), values),
  ]);
  mkdirSync(dir, { recursive: true });
  const conf = join(dir, "nginx.conf");
  writeFileSync(conf, rendered);
  for (const [file, text] of included) writeFileSync(join(dir, file), text);
  return conf;
}

/** The CLI's arguments checked all at once: every problem in one message. */
export function parseCli(args, template = readFileSync(TEMPLATE, "utf8"), env = process.env) {
  const known = placeholders(`${template}\n${includedText()}`);
  const problems = [];
  const [dir, ...pairs] = args;
  if (dir === undefined || dir.includes("=") || dir.startsWith("-")) {
    problems.push("the first argument must be the output directory");
  }
  const values = {};
  const empty = new Set();
  for (const pair of dir === undefined || dir.includes("=") ? args : pairs) {
    const at = pair.indexOf("=");
    if (at <= 0) {
      if (pair !== dir) problems.push(`"${pair}" is not NAME=VALUE`);
      continue;
    }
    const name = pair.slice(0, at);
    const value = pair.slice(at + 1);
    if (!known.includes(name)) problems.push(`unknown name ${name} (known: ${known.join(", ")})`);
    // Most often a shell variable that was not set: refused here rather than by nginx later.
    else if (value === "") empty.add(name);
    else if (name === "API_KEY_HEADER" && apiKeyHeaderProblem(value) !== undefined)
      problems.push(apiKeyHeaderProblem(value));
    else if (BOOLEANS.includes(name) && booleanProblem(name, value) !== undefined)
      problems.push(booleanProblem(name, value));
    else values[name] = BOOLEANS.includes(name) ? booleanValue(value) : value;
  }
  // As envoy/render.mjs does: tollgate's own API_KEY_HEADER, when the shell that runs both has it.
  if (values.API_KEY_HEADER === undefined && !empty.has("API_KEY_HEADER") && env.API_KEY_HEADER) {
    const problem = apiKeyHeaderProblem(env.API_KEY_HEADER);
    if (problem !== undefined) problems.push(`${problem} (from the environment)`);
    else if (known.includes("API_KEY_HEADER")) values.API_KEY_HEADER = env.API_KEY_HEADER;
  }
  // And its API_KEY_FORWARD, so that nginx drops or forwards the key as tollgate tells Envoy to:
  // read as tollgate reads it (blank is unset, any case).
  const forward = env.API_KEY_FORWARD?.trim();
  if (values.API_KEY_FORWARD === undefined && !empty.has("API_KEY_FORWARD") && forward) {
    const problem = booleanProblem("API_KEY_FORWARD", forward);
    if (problem !== undefined) problems.push(`${problem} (from the environment)`);
    else if (known.includes("API_KEY_FORWARD")) values.API_KEY_FORWARD = booleanValue(forward);
  }
  if (empty.size > 0) problems.push(`no value after ${[...empty].map((name) => `${name}=`).join(" ")}`);
  const missing = known.filter(
    (name) => values[name] === undefined && !empty.has(name) && DEFAULTS[name] === undefined,
  );
  if (missing.length > 0) problems.push(`missing ${missing.map((name) => `${name}=…`).join(" ")}`);
  return { dir, values, problems };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const args = process.argv.slice(2);
  if (args.includes("--help") || args.includes("-h")) {
    process.stdout.write(HELP);
    process.exit(0);
  }
  const { dir, values, problems } = parseCli(args);
  if (problems.length > 0) {
    process.stderr.write(
      `render.mjs: nothing written:\n${problems.map((p) => `  - ${p}`).join("\n")}\n(node nginx/render.mjs --help for usage)\n`,
    );
    process.exit(2);
  }
  try {
    process.stdout.write(`${writeNginxConfig({ dir, values })}\n`);
  } catch (error) {
    process.stderr.write(`render.mjs: ${error.message}\n`);
    process.exit(1);
  }
}
