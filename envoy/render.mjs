// Renders envoy.yaml, envoy-grpc.yaml and envoy-ratelimit.yaml for an Envoy outside compose: the same
// configurations with tollgate's, the upstream's and Envoy's own addresses in place of compose's.
// Usage: node envoy/render.mjs --help
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { isScalar, isSeq, parseDocument, visit } from "yaml";
import { apiKeyHeaderProblem } from "../scripts/api-key-header.mjs";

const ENVOY_DIR = fileURLToPath(new URL(".", import.meta.url));

/** Each configuration, with the clusters whose endpoint each address replaces. */
export const CONFIGS = {
  http: {
    file: "envoy.yaml",
    clusters: { tollgate_check: "check", tollgate_public: "public", upstream: "upstream" },
  },
  grpc: {
    file: "envoy-grpc.yaml",
    clusters: { tollgate_grpc: "grpc", tollgate_public: "public", upstream: "upstream" },
  },
  ratelimit: {
    file: "envoy-ratelimit.yaml",
    clusters: {
      tollgate_grpc: "grpc",
      tollgate_rls: "grpc",
      tollgate_public: "public",
      upstream: "upstream",
    },
  },
};

/** Each address: its flag, its environment variable, and its default when it has one. */
export const ADDRESSES = {
  check: { flag: "check-addr", env: "CHECK_ADDR" },
  grpc: { flag: "grpc-addr", env: "GRPC_ADDR" },
  public: { flag: "public-addr", env: "PUBLIC_ADDR" },
  upstream: { flag: "upstream-addr", env: "UPSTREAM_ADDR" },
  listen: { flag: "listen", env: "ENVOY_LISTEN", fallback: "0.0.0.0:10000" },
  // The admin interface can stop Envoy (/quitquitquit): on loopback unless asked otherwise.
  admin: { flag: "admin", env: "ENVOY_ADMIN", fallback: "127.0.0.1:9901" },
};

/** tollgate's API_KEY_HEADER default, the header envoy/'s files name; its rule, any case. */
export const DEFAULT_API_KEY_HEADER = "x-api-key";
/**
 * The fields that name the API key header: ext_authz's allowed_headers, a rate limit descriptor's,
 * the check's decoder_header_mutation_rules (a regular expression: a header name matches itself).
 */
const HEADER_FIELDS = new Set(["exact", "header_name", "regex"]);
/** The lists that name it among others: the virtual host's request_headers_to_remove. */
const HEADER_LISTS = new Set(["request_headers_to_remove"]);

const HELP = `usage: node envoy/render.mjs OUT_DIR [--only http|grpc|ratelimit] [--check-addr HOST:PORT] ...

Writes Envoy's configurations into OUT_DIR for an Envoy on a bare machine (envoy -c OUT_DIR/envoy.yaml),
and prints their paths: envoy.yaml (ext_authz over HTTP), envoy-grpc.yaml (ext_authz over gRPC) and
envoy-ratelimit.yaml (gRPC ext_authz and Envoy's rate limit filter; start tollgate with RLS_CONFIG,
e.g. envoy/ratelimit-config/config). They are envoy/'s files with these addresses in place of
compose's. Each address comes from its flag, else from its environment variable. Nothing is written
when an address a configuration needs is missing or is not HOST:PORT.

  --check-addr    CHECK_ADDR     tollgate's CHECK_PORT (envoy.yaml)                 e.g. 127.0.0.1:9191
  --grpc-addr     GRPC_ADDR      tollgate's GRPC_PORT (envoy-grpc, envoy-ratelimit) e.g. 127.0.0.1:8081
  --public-addr   PUBLIC_ADDR    tollgate's PORT                                    e.g. 127.0.0.1:8080
  --upstream-addr UPSTREAM_ADDR  the application behind Envoy                       e.g. 127.0.0.1:8000
  --listen        ENVOY_LISTEN   where Envoy listens (default 0.0.0.0:10000)
  --admin         ENVOY_ADMIN    Envoy's admin interface (default 127.0.0.1:9901; it can stop Envoy)
  --api-key-header API_KEY_HEADER the header carrying an API key, as tollgate's (default x-api-key):
                 copied into the check (envoy.yaml) and the api_key descriptor (envoy-ratelimit.yaml,
                 which also keeps it from the check's removal and removes it in the router)
  --only          http, grpc or ratelimit: that configuration alone (repeatable; default all three)
`;

/** "host:port" or "[v6]:port" → its parts; undefined when it is neither. */
export function parseAddress(text) {
  const match = /^(?:\[([0-9A-Fa-f:.]+)\]|([A-Za-z0-9.-]+)):(\d{1,5})$/.exec(text);
  const port = Number(match?.[3]);
  if (match === null || port < 1 || port > 65535) return undefined;
  return { host: match[1] ?? match[2], port, ipv6: match[1] !== undefined };
}

function setSocket(doc, path, address) {
  doc.setIn([...path, "address"], address.host);
  doc.setIn([...path, "port_value"], address.port);
}

/** Every field that names the API key header gets `header` (Envoy matches header names in lower case). */
function setApiKeyHeader(doc, header) {
  const rename = (scalar) => {
    if (isScalar(scalar) && scalar.value === DEFAULT_API_KEY_HEADER) scalar.value = header.toLowerCase();
  };
  visit(doc, {
    Pair(_, pair) {
      if (!isScalar(pair.key)) return;
      if (HEADER_FIELDS.has(pair.key.value)) rename(pair.value);
      else if (HEADER_LISTS.has(pair.key.value) && isSeq(pair.value))
        for (const item of pair.value.items) rename(item);
    },
  });
}

/**
 * One configuration's text with `addresses` (parsed) in place of compose's, and `apiKeyHeader` in
 * place of x-api-key; its comments kept.
 */
export function renderEnvoyConfig(name, addresses, apiKeyHeader = DEFAULT_API_KEY_HEADER) {
  const { file, clusters } = CONFIGS[name];
  const doc = parseDocument(readFileSync(join(ENVOY_DIR, file), "utf8"));
  setApiKeyHeader(doc, apiKeyHeader);
  setSocket(doc, ["admin", "address", "socket_address"], addresses.admin);
  setSocket(doc, ["static_resources", "listeners", 0, "address", "socket_address"], addresses.listen);
  const list = doc.getIn(["static_resources", "clusters"]);
  for (const [cluster, key] of Object.entries(clusters)) {
    const index = list.items.findIndex((item) => item.get("name") === cluster);
    if (index < 0) throw new Error(`envoy/${file} has no cluster ${cluster}`);
    const endpoint = ["static_resources", "clusters", index];
    const socket = [...endpoint, "load_assignment", "endpoints", 0, "lb_endpoints", 0, "endpoint", "address"];
    setSocket(doc, [...socket, "socket_address"], addresses[key]);
    // A name or an IPv4 address resolves under V4_ONLY; an IPv6 address needs its own family.
    if (addresses[key].ipv6) doc.setIn([...endpoint, "dns_lookup_family"], "V6_ONLY");
  }
  const used = new Set(["listen", "admin", ...Object.values(clusters)]);
  const given = Object.entries(addresses)
    .filter(([key]) => used.has(key))
    .map(([key, a]) => `${key} ${a.ipv6 ? `[${a.host}]` : a.host}:${a.port}`)
    .join(", ");
  const keyHeader =
    apiKeyHeader === DEFAULT_API_KEY_HEADER ? "" : `, API key header ${apiKeyHeader.toLowerCase()}`;
  const header = [
    ` Rendered by envoy/render.mjs from envoy/${file} (${given}${keyHeader}).`,
    " The comments below were written for docker-compose.yml's addresses.",
  ];
  doc.commentBefore = header.join("\n");
  return doc.toString({ lineWidth: 0 });
}

/** The arguments and the environment checked at once: every problem in one list. */
export function parseCli(args, env = process.env) {
  const problems = [];
  let parsed;
  try {
    parsed = parseArgs({
      args,
      allowPositionals: true,
      options: {
        ...Object.fromEntries(Object.values(ADDRESSES).map(({ flag }) => [flag, { type: "string" }])),
        only: { type: "string", multiple: true },
        "api-key-header": { type: "string" },
        help: { type: "boolean", short: "h" },
      },
    });
  } catch (error) {
    // parseArgs names the flag: "Unknown option '--x'", "Option '--listen <value>' argument missing".
    return { problems: [error.message.replace(/\. To specify .*$/, "")] };
  }
  const { values, positionals } = parsed;
  if (values.help) return { help: true, problems };
  const [dir, ...extra] = positionals;
  if (dir === undefined) problems.push("the output directory is missing");
  for (const arg of extra) problems.push(`unexpected argument "${arg}"`);
  const only = (values.only ?? []).flatMap((v) => v.split(","));
  for (const name of only)
    if (!(name in CONFIGS)) problems.push(`--only ${name}: not http, grpc or ratelimit`);
  const names = only.length > 0 ? [...new Set(only)].filter((n) => n in CONFIGS) : Object.keys(CONFIGS);
  const needed = new Set(["listen", "admin", ...names.flatMap((n) => Object.values(CONFIGS[n].clusters))]);
  const addresses = {};
  for (const key of Object.keys(ADDRESSES).filter((k) => needed.has(k))) {
    const { flag, env: variable, fallback } = ADDRESSES[key];
    const text = values[flag] ?? (env[variable] || undefined) ?? fallback;
    const where = values[flag] !== undefined ? `--${flag}` : variable;
    if (text === undefined) problems.push(`missing --${flag} (or ${variable})`);
    else if (parseAddress(text) === undefined) problems.push(`${where} "${text}" is not HOST:PORT`);
    else addresses[key] = parseAddress(text);
  }
  const apiKeyHeader =
    values["api-key-header"] ?? (env.API_KEY_HEADER || undefined) ?? DEFAULT_API_KEY_HEADER;
  const headerProblem = apiKeyHeaderProblem(apiKeyHeader);
  if (headerProblem !== undefined) {
    const where = values["api-key-header"] !== undefined ? "--api-key-header" : "API_KEY_HEADER";
    problems.push(`${where} "${apiKeyHeader}" ${headerProblem}`);
  }
  return { dir, names, addresses, apiKeyHeader, problems };
}

/** Renders every configuration first, then writes them: nothing is written when one fails. */
export function writeEnvoyConfigs({ dir, names, addresses, apiKeyHeader }) {
  const rendered = names.map((name) => [
    CONFIGS[name].file,
    renderEnvoyConfig(name, addresses, apiKeyHeader),
  ]);
  mkdirSync(dir, { recursive: true });
  return rendered.map(([file, text]) => {
    writeFileSync(join(dir, file), text);
    return join(dir, file);
  });
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const cli = parseCli(process.argv.slice(2));
  if (cli.help) {
    process.stdout.write(HELP);
    process.exit(0);
  }
  if (cli.problems.length > 0) {
    process.stderr.write(
      `envoy/render.mjs: nothing written: ${cli.problems.join("; ")} (--help for usage)\n`,
    );
    process.exit(2);
  }
  try {
    process.stdout.write(`${writeEnvoyConfigs(cli).join("\n")}\n`);
  } catch (error) {
    process.stderr.write(`envoy/render.mjs: ${error.message}\n`);
    process.exit(1);
  }
}
