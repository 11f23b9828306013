// Reads envoy/envoy.yaml (HTTP ext_authz) or envoy/envoy-grpc.yaml (gRPC ext_authz) into the settings the
// Envoy harness imitates; refuses settings it cannot imitate.
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { parse } from "yaml";

/** The repository's Envoy configurations the harness can imitate. */
export type EnvoyYamlName = "envoy.yaml" | "envoy-grpc.yaml";

export const envoyYamlPath = (name: EnvoyYamlName): string =>
  fileURLToPath(new URL(`../../envoy/${name}`, import.meta.url));

export const ENVOY_YAML_PATH = envoyYamlPath("envoy.yaml");

type Node = Record<string, unknown>;
export type NameMatcher = (name: string) => boolean;

export type EnvoyRoute = {
  match: { path: string } | { prefix: string };
  cluster: string;
  timeoutMs: number;
  /** `typed_per_filter_config` disables these HTTP filters (by filter name) on this route. */
  disabledFilters: ReadonlySet<string>;
};

export type ExtAuthzSettings = {
  name: string;
  cluster: string;
  timeoutMs: number;
  pathPrefix: string;
  failureModeAllow: boolean;
  failureModeAllowHeaderAdd: boolean;
  statusOnError: number;
  /** Client request headers copied into the check (allowed_headers plus the ones Envoy always sends). */
  requestHeader: NameMatcher;
  disallowedHeader: NameMatcher;
  /** `authorization_request.headers_to_add`: values may hold %…% formatters. */
  headersToAdd: ReadonlyArray<{ key: string; value: string }>;
  upstreamHeader: NameMatcher;
  upstreamHeaderToAppend: NameMatcher;
  clientHeader: NameMatcher;
  clientHeaderOnSuccess: NameMatcher;
};

/** The ext_authz filter with `grpc_service.envoy_grpc`: what Envoy's gRPC client is told. */
export type GrpcExtAuthzSettings = {
  name: string;
  /** `envoy_grpc.cluster_name`; also the :authority Envoy sends unless `authority` is set. */
  cluster: string;
  authority: string;
  /** `grpc_service.timeout`: the whole call's deadline (200 ms when absent, as Envoy's filter says). */
  timeoutMs: number;
  failureModeAllow: boolean;
  failureModeAllowHeaderAdd: boolean;
  statusOnError: number;
};

export type HttpFilter =
  | { kind: "header_mutation"; name: string; removeFromRequest: readonly string[] }
  | ({ kind: "ext_authz" } & ExtAuthzSettings)
  | ({ kind: "ext_authz_grpc" } & GrpcExtAuthzSettings)
  | { kind: "router"; name: string };

export type LocalReplyMapper = {
  matches(status: number, flags: ReadonlySet<string>): boolean;
  statusCode?: number;
  body?: { contentType: string; text: string };
  /** headers_to_add, static values only, each overwriting a header of the same name. */
  headers: ReadonlyArray<[string, string]>;
};

export type EnvoyCluster = {
  endpoints: ReadonlyArray<{ address: string; port: number }>;
  maxConnections: number;
  idleTimeoutMs: number;
};

export type EnvoyConfig = {
  listenerPort: number;
  useRemoteAddress: boolean;
  xffNumTrustedHops: number;
  preserveExternalRequestId: boolean;
  /** The downstream connection idle timeout. */
  idleTimeoutMs: number;
  normalizePath: boolean;
  mergeSlashes: boolean;
  rejectEscapedSlashes: boolean;
  rejectHeadersWithUnderscores: boolean;
  routes: readonly EnvoyRoute[];
  filters: readonly HttpFilter[];
  localReplies: readonly LocalReplyMapper[];
  clusters: ReadonlyMap<string, EnvoyCluster>;
};

/** Envoy's `type.v3.StatusCode` names, as far as a config here may use them. */
const STATUS_CODES: Record<string, number> = {
  OK: 200,
  Created: 201,
  BadRequest: 400,
  Unauthorized: 401,
  Forbidden: 403,
  NotFound: 404,
  TooManyRequests: 429,
  InternalServerError: 500,
  BadGateway: 502,
  ServiceUnavailable: 503,
  GatewayTimeout: 504,
};

/** The formatters the harness substitutes in `headers_to_add`. */
export const HEADER_FORMATTERS =
  /%(DOWNSTREAM_REMOTE_ADDRESS|DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT|REQ\([^)]+\))%/g;

const unsupported = (what: string): Error =>
  new Error(`envoy harness: ${what} is not imitated; extend test/support/envoy-harness.ts first`);

function obj(value: unknown, where: string): Node {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new Error(`envoy.yaml: ${where} must be a mapping`);
  }
  return value as Node;
}

function list(value: unknown, where: string): unknown[] {
  if (value === undefined) return [];
  if (!Array.isArray(value)) throw new Error(`envoy.yaml: ${where} must be a list`);
  return value;
}

function onlyKeys(node: Node, allowed: readonly string[], where: string): void {
  for (const key of Object.keys(node)) if (!allowed.includes(key)) throw unsupported(`${where}.${key}`);
}

/** Protobuf JSON durations as Envoy's YAML writes them: "0.25s", "10s". */
export function durationMs(value: unknown, fallbackMs: number): number {
  if (value === undefined) return fallbackMs;
  const match = typeof value === "string" ? /^(\d+(?:\.\d+)?)s$/.exec(value) : null;
  if (match === null) throw new Error(`envoy.yaml: bad duration ${JSON.stringify(value)}`);
  return Math.round(Number(match[1]) * 1000);
}

function stringMatcher(pattern: unknown, where: string): NameMatcher {
  const node = obj(pattern, where);
  onlyKeys(node, ["exact", "prefix", "suffix", "contains", "ignore_case"], where);
  const fold = node.ignore_case === true ? (s: string) => s.toLowerCase() : (s: string) => s;
  if (typeof node.exact === "string") return (name) => fold(name) === fold(node.exact as string);
  if (typeof node.prefix === "string") return (name) => fold(name).startsWith(fold(node.prefix as string));
  if (typeof node.suffix === "string") return (name) => fold(name).endsWith(fold(node.suffix as string));
  if (typeof node.contains === "string") return (name) => fold(name).includes(fold(node.contains as string));
  throw unsupported(`${where} without exact/prefix/suffix/contains`);
}

/** A ListStringMatcher; `always` names match whenever the list is used. */
function listMatcher(value: unknown, where: string, always: readonly string[] = []): NameMatcher {
  if (value === undefined) return () => false;
  const matchers = list(obj(value, where).patterns, `${where}.patterns`).map((p, i) =>
    stringMatcher(p, `${where}.patterns[${i}]`),
  );
  return (name) => always.includes(name) || matchers.some((m) => m(name));
}

function statusCode(value: unknown, fallback: number, where: string): number {
  if (value === undefined) return fallback;
  const code = obj(value, where).code;
  const status = typeof code === "number" ? code : STATUS_CODES[String(code)];
  if (status === undefined) throw new Error(`envoy.yaml: unknown status code ${String(code)} at ${where}`);
  return status;
}

/**
 * An ext_authz filter over gRPC. Only what envoy/envoy-grpc.yaml uses is taken: with allowed_headers,
 * disallowed_headers, with_request_body, include_peer_certificate, encode_raw_headers and the like the
 * CheckRequest would change, and the harness does not build those variants.
 */
function grpcExtAuthz(name: string, config: Node): GrpcExtAuthzSettings {
  const where = `ext_authz ${name}`;
  onlyKeys(
    config,
    [
      "@type",
      "stat_prefix",
      "failure_mode_allow",
      "failure_mode_allow_header_add",
      "status_on_error",
      "grpc_service",
      "transport_api_version",
    ],
    where,
  );
  if (config.transport_api_version !== undefined && config.transport_api_version !== "V3") {
    throw unsupported(`${where}.transport_api_version ${String(config.transport_api_version)}`);
  }
  const service = obj(config.grpc_service, `${where}.grpc_service`);
  onlyKeys(service, ["envoy_grpc", "timeout"], `${where}.grpc_service`);
  const envoyGrpc = obj(service.envoy_grpc, `${where}.grpc_service.envoy_grpc`);
  onlyKeys(envoyGrpc, ["cluster_name", "authority"], `${where}.grpc_service.envoy_grpc`);
  const cluster = String(envoyGrpc.cluster_name);
  return {
    name,
    cluster,
    authority: typeof envoyGrpc.authority === "string" ? envoyGrpc.authority : cluster,
    timeoutMs: durationMs(service.timeout, 200),
    failureModeAllow: config.failure_mode_allow === true,
    failureModeAllowHeaderAdd: config.failure_mode_allow_header_add === true,
    statusOnError: statusCode(config.status_on_error, 403, `${where}.status_on_error`),
  };
}

function extAuthz(name: string, config: Node): ExtAuthzSettings {
  const where = `ext_authz ${name}`;
  onlyKeys(
    config,
    [
      "@type",
      "stat_prefix",
      "failure_mode_allow",
      "failure_mode_allow_header_add",
      "status_on_error",
      "allowed_headers",
      "disallowed_headers",
      "http_service",
      "transport_api_version",
    ],
    where,
  );
  const http = obj(config.http_service, `${where}.http_service`);
  onlyKeys(http, ["server_uri", "path_prefix", "authorization_request", "authorization_response"], where);
  const serverUri = obj(http.server_uri, `${where}.http_service.server_uri`);
  const request = obj(http.authorization_request ?? {}, `${where}.authorization_request`);
  onlyKeys(request, ["headers_to_add", "allowed_headers"], `${where}.authorization_request`);
  const response = obj(http.authorization_response ?? {}, `${where}.authorization_response`);
  onlyKeys(
    response,
    [
      "allowed_upstream_headers",
      "allowed_upstream_headers_to_append",
      "allowed_client_headers",
      "allowed_client_headers_on_success",
    ],
    `${where}.authorization_response`,
  );
  if (config.allowed_headers !== undefined && request.allowed_headers !== undefined) {
    throw new Error("envoy.yaml: Invalid duplicate configuration for allowed_headers.");
  }
  const headersToAdd = list(request.headers_to_add, `${where}.headers_to_add`).map((entry, i) => {
    const header = obj(entry, `${where}.headers_to_add[${i}]`);
    onlyKeys(header, ["key", "value"], `${where}.headers_to_add[${i}]`);
    const value = String(header.value ?? "");
    const leftover = value.replace(HEADER_FORMATTERS, "");
    if (leftover.includes("%")) throw unsupported(`the formatter in ${JSON.stringify(value)}`);
    return { key: String(header.key).toLowerCase(), value };
  });
  // A non-empty allowed_client_headers also lets these through; an empty one lets all but Host through.
  const clientList = response.allowed_client_headers;
  const clientHeader =
    clientList === undefined
      ? (header: string) => header !== "host"
      : listMatcher(clientList, `${where}.allowed_client_headers`, [
          "content-length",
          "www-authenticate",
          "location",
        ]);
  return {
    name,
    cluster: String(serverUri.cluster),
    timeoutMs: durationMs(serverUri.timeout, 200),
    pathPrefix: typeof http.path_prefix === "string" ? http.path_prefix : "",
    failureModeAllow: config.failure_mode_allow === true,
    failureModeAllowHeaderAdd: config.failure_mode_allow_header_add === true,
    statusOnError: statusCode(config.status_on_error, 403, `${where}.status_on_error`),
    requestHeader: listMatcher(
      config.allowed_headers ?? request.allowed_headers ?? { patterns: [] },
      `${where}.allowed_headers`,
      ["authorization", ":method", ":path", "host"],
    ),
    disallowedHeader: listMatcher(config.disallowed_headers, `${where}.disallowed_headers`),
    headersToAdd,
    upstreamHeader: listMatcher(response.allowed_upstream_headers, `${where}.allowed_upstream_headers`),
    upstreamHeaderToAppend: listMatcher(
      response.allowed_upstream_headers_to_append,
      `${where}.allowed_upstream_headers_to_append`,
    ),
    clientHeader,
    clientHeaderOnSuccess: listMatcher(
      response.allowed_client_headers_on_success,
      `${where}.allowed_client_headers_on_success`,
    ),
  };
}

function httpFilter(entry: unknown, index: number): HttpFilter {
  const filter = obj(entry, `http_filters[${index}]`);
  const name = String(filter.name);
  const config = obj(filter.typed_config ?? {}, `${name}.typed_config`);
  const type = String(config["@type"] ?? "");
  if (type.endsWith(".HeaderMutation")) {
    const mutations = obj(config.mutations ?? {}, `${name}.mutations`);
    onlyKeys(mutations, ["request_mutations"], `${name}.mutations`);
    const removeFromRequest = list(mutations.request_mutations, `${name}.request_mutations`).map((m, i) => {
      const mutation = obj(m, `${name}.request_mutations[${i}]`);
      onlyKeys(mutation, ["remove"], `${name}.request_mutations[${i}]`);
      return String(mutation.remove).toLowerCase();
    });
    return { kind: "header_mutation", name, removeFromRequest };
  }
  if (type.endsWith(".ext_authz.v3.ExtAuthz")) {
    if (config.grpc_service !== undefined && config.http_service !== undefined) {
      throw new Error(`envoy.yaml: ${name} has both grpc_service and http_service`);
    }
    return config.grpc_service === undefined
      ? { kind: "ext_authz", ...extAuthz(name, config) }
      : { kind: "ext_authz_grpc", ...grpcExtAuthz(name, config) };
  }
  if (type.endsWith(".router.v3.Router")) return { kind: "router", name };
  throw unsupported(`the HTTP filter ${name} (${type})`);
}

function route(entry: unknown, index: number): EnvoyRoute {
  const node = obj(entry, `routes[${index}]`);
  const match = obj(node.match, `routes[${index}].match`);
  onlyKeys(match, ["path", "prefix"], `routes[${index}].match`);
  const action = obj(node.route, `routes[${index}].route`);
  onlyKeys(action, ["cluster", "timeout"], `routes[${index}].route`);
  const disabledFilters = new Set<string>();
  for (const [filterName, perRoute] of Object.entries(obj(node.typed_per_filter_config ?? {}, "per-route"))) {
    const settings = obj(perRoute, `routes[${index}].typed_per_filter_config.${filterName}`);
    onlyKeys(settings, ["@type", "disabled"], `routes[${index}].typed_per_filter_config.${filterName}`);
    if (settings.disabled === true) disabledFilters.add(filterName);
  }
  return {
    match: typeof match.path === "string" ? { path: match.path } : { prefix: String(match.prefix) },
    cluster: String(action.cluster),
    timeoutMs: durationMs(action.timeout, 15_000),
    disabledFilters,
  };
}

type ReplyPredicate = (status: number, flags: ReadonlySet<string>) => boolean;

/** A local_reply_config filter as a predicate; building it refuses what the harness cannot evaluate. */
function replyFilter(node: Node): ReplyPredicate {
  if (node.and_filter !== undefined || node.or_filter !== undefined) {
    const all = node.and_filter !== undefined;
    const inner = list(obj(node.and_filter ?? node.or_filter, "and/or_filter").filters, "filters").map((f) =>
      replyFilter(obj(f, "filter")),
    );
    return all
      ? (status, flags) => inner.every((p) => p(status, flags))
      : (status, flags) => inner.some((p) => p(status, flags));
  }
  if (node.response_flag_filter !== undefined) {
    const wanted = list(obj(node.response_flag_filter, "response_flag_filter").flags, "flags").map(String);
    return (_status, flags) =>
      wanted.length === 0 ? flags.size > 0 : wanted.some((flag) => flags.has(flag));
  }
  if (node.status_code_filter !== undefined) {
    const comparison = obj(obj(node.status_code_filter, "status_code_filter").comparison, "comparison");
    const value = Number(obj(comparison.value, "comparison.value").default_value);
    const op = comparison.op ?? "EQ";
    if (op === "EQ") return (status) => status === value;
    if (op === "GE") return (status) => status >= value;
    if (op === "LE") return (status) => status <= value;
    throw unsupported(`status_code_filter op ${String(op)}`);
  }
  throw unsupported(`the local reply filter ${Object.keys(node).join(", ")}`);
}

function localReply(entry: unknown, index: number): LocalReplyMapper {
  const mapper = obj(entry, `local_reply_config.mappers[${index}]`);
  onlyKeys(
    mapper,
    ["filter", "status_code", "body_format_override", "headers_to_add"],
    `local_reply_config.mappers[${index}]`,
  );
  const headers = list(mapper.headers_to_add ?? [], "headers_to_add").map((entry): [string, string] => {
    const option = obj(entry, "headers_to_add[]");
    onlyKeys(option, ["header", "append_action"], "headers_to_add[]");
    if ((option.append_action ?? "OVERWRITE_IF_EXISTS_OR_ADD") !== "OVERWRITE_IF_EXISTS_OR_ADD") {
      throw unsupported(`headers_to_add append_action ${String(option.append_action)}`);
    }
    const header = obj(option.header, "headers_to_add[].header");
    const value = String(header.value);
    if (value.includes("%")) throw unsupported("formatters in local reply headers");
    return [String(header.key).toLowerCase(), value];
  });
  const matches = replyFilter(obj(mapper.filter, `mappers[${index}].filter`));
  const format =
    mapper.body_format_override === undefined ? undefined : obj(mapper.body_format_override, "body");
  let body: LocalReplyMapper["body"];
  if (format?.json_format !== undefined) {
    const text = JSON.stringify(format.json_format);
    if (text.includes("%")) throw unsupported("formatters in local reply bodies");
    body = { contentType: "application/json", text: `${text}\n` };
  } else if (typeof format?.text_format === "string") {
    if (format.text_format.includes("%")) throw unsupported("formatters in local reply bodies");
    body = { contentType: "text/plain", text: format.text_format };
  }
  return {
    matches,
    headers,
    ...(typeof mapper.status_code === "number" ? { statusCode: mapper.status_code } : {}),
    ...(body === undefined ? {} : { body }),
  };
}

function cluster(entry: unknown): [string, EnvoyCluster] {
  const node = obj(entry, "cluster");
  const name = String(node.name);
  const endpoints = list(obj(node.load_assignment, `${name}.load_assignment`).endpoints, "endpoints").flatMap(
    (group) =>
      list(obj(group, "endpoints[]").lb_endpoints, "lb_endpoints").map((lb) => {
        const socket = obj(
          obj(obj(obj(lb, "lb").endpoint, "endpoint").address, "address").socket_address,
          "sa",
        );
        return { address: String(socket.address), port: Number(socket.port_value) };
      }),
  );
  const thresholds = list(obj(node.circuit_breakers ?? {}, "circuit_breakers").thresholds, "thresholds");
  const first = thresholds[0] === undefined ? {} : obj(thresholds[0], "thresholds[0]");
  const options = obj(node.typed_extension_protocol_options ?? {}, "protocol options");
  const http = Object.values(options)[0];
  const common =
    http === undefined ? {} : obj(obj(http, "http").common_http_protocol_options ?? {}, "common");
  return [
    name,
    {
      endpoints,
      maxConnections: typeof first.max_connections === "number" ? first.max_connections : 1024,
      idleTimeoutMs: durationMs(common.idle_timeout, 3_600_000),
    },
  ];
}

/** The raw YAML of envoy.yaml (or `text`), parsed. */
export function readEnvoyYaml(text = readFileSync(ENVOY_YAML_PATH, "utf8")): Node {
  return obj(parse(text), "the document");
}

/** The text of one of the repository's Envoy configurations. */
export const envoyYamlText = (name: EnvoyYamlName): string => readFileSync(envoyYamlPath(name), "utf8");

/** What the harness needs from envoy.yaml: one listener with one HTTP connection manager. */
export function loadEnvoyConfig(text?: string): EnvoyConfig {
  const root = readEnvoyYaml(text);
  const resources = obj(root.static_resources, "static_resources");
  const listeners = list(resources.listeners, "listeners");
  if (listeners.length !== 1) throw unsupported(`${listeners.length} listeners`);
  const listener = obj(listeners[0], "listeners[0]");
  const chains = list(listener.filter_chains, "filter_chains");
  const networkFilters = list(obj(chains[0], "filter_chains[0]").filters, "filters");
  if (chains.length !== 1 || networkFilters.length !== 1) throw unsupported("more than one filter chain");
  const hcm = obj(obj(networkFilters[0], "filters[0]").typed_config, "http_connection_manager");
  const virtualHosts = list(obj(hcm.route_config, "route_config").virtual_hosts, "virtual_hosts");
  const host = obj(virtualHosts[0], "virtual_hosts[0]");
  if (virtualHosts.length !== 1 || !list(host.domains, "domains").includes("*")) {
    throw unsupported('virtual hosts other than one with domains ["*"]');
  }
  onlyKeys(host, ["name", "domains", "routes"], "virtual_hosts[0]");
  const common = obj(hcm.common_http_protocol_options ?? {}, "common_http_protocol_options");
  const localReplyConfig = obj(hcm.local_reply_config ?? {}, "local_reply_config");
  return {
    listenerPort: Number(obj(obj(listener.address, "address").socket_address, "socket_address").port_value),
    useRemoteAddress: hcm.use_remote_address === true,
    xffNumTrustedHops: typeof hcm.xff_num_trusted_hops === "number" ? hcm.xff_num_trusted_hops : 0,
    preserveExternalRequestId: hcm.preserve_external_request_id === true,
    idleTimeoutMs: durationMs(common.idle_timeout, 3_600_000),
    normalizePath: hcm.normalize_path === true,
    mergeSlashes: hcm.merge_slashes === true,
    rejectEscapedSlashes: hcm.path_with_escaped_slashes_action === "REJECT_REQUEST",
    rejectHeadersWithUnderscores: common.headers_with_underscores_action === "REJECT_REQUEST",
    routes: list(host.routes, "routes").map(route),
    filters: list(hcm.http_filters, "http_filters").map(httpFilter),
    localReplies: list(localReplyConfig.mappers, "mappers").map(localReply),
    clusters: new Map(list(resources.clusters, "clusters").map(cluster)),
  };
}
