// docker-compose.yml, docker-compose.cluster.yml, envoy/envoy.yaml, envoy/envoy-grpc.yaml, envoy/envoy-ratelimit.yaml
// (with its example rate limit config) and prometheus.yml checked against the contract's ports, paths and headers.
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { parse } from "yaml";
import {
  type Address,
  CONFIGS,
  type ConfigName,
  parseAddress,
  renderEnvoyConfig,
} from "../../envoy/render.mjs";
import { loadConfig } from "../../src/config/env.js";
import { apiKeyHeaders } from "../../src/frontends/api-key-headers.js";
import { loadEnvoyConfig } from "../support/envoy-config.js";

type Node = Record<string, unknown>;
const ROOT = new URL("../../", import.meta.url);
const load = (path: string): Node => parse(readFileSync(new URL(path, ROOT), "utf8")) as Node;
const node = (value: unknown): Node => (value ?? {}) as Node;
const nodes = (value: unknown): Node[] => (Array.isArray(value) ? (value as Node[]) : []);

const compose = load("docker-compose.yml");
const services = node(compose.services);

/** One Envoy bootstrap of envoy/ (or rendered from it), taken apart into the pieces the tests below look at. */
function envoyParts(path: string | Node) {
  const resources = node((typeof path === "string" ? load(path) : path).static_resources);
  const listener = nodes(resources.listeners)[0] ?? {};
  const hcm = node(node(nodes(node(nodes(listener.filter_chains)[0]).filters)[0]).typed_config);
  const httpFilters = nodes(hcm.http_filters);
  const routes = nodes(node(nodes(node(hcm.route_config).virtual_hosts)[0]).routes);
  const extAuthzIndex = httpFilters.findIndex((f) => f.name === "envoy.filters.http.ext_authz");
  const extAuthz = node(httpFilters[extAuthzIndex]?.typed_config);
  const clusters = nodes(resources.clusters);
  /** "host:port" of every endpoint of an Envoy cluster. */
  const endpointsOf = (clusterName: unknown): string[] => {
    const cluster = clusters.find((c) => c.name === clusterName);
    return nodes(node(cluster?.load_assignment).endpoints).flatMap((group) =>
      nodes(group.lb_endpoints).map((lb) => {
        const socket = node(node(node(lb.endpoint).address).socket_address);
        return `${String(socket.address)}:${String(socket.port_value)}`;
      }),
    );
  };
  const routeFor = (match: Node): Node | undefined =>
    routes.find((r) => JSON.stringify(r.match) === JSON.stringify(match));
  return {
    resources,
    listener,
    hcm,
    httpFilters,
    routes,
    extAuthzIndex,
    extAuthz,
    clusters,
    endpointsOf,
    routeFor,
  };
}

const { resources, listener, hcm, httpFilters, routes, extAuthzIndex, extAuthz, endpointsOf, routeFor } =
  envoyParts("envoy/envoy.yaml");
const httpService = node(extAuthz.http_service);
const authzResponse = node(httpService.authorization_response);
const grpcEnvoy = envoyParts("envoy/envoy-grpc.yaml");
const rlsEnvoy = envoyParts("envoy/envoy-ratelimit.yaml");

/** A pattern list as a set of "exact:x" / "prefix:y" strings, so that order does not matter. */
const patterns = (list: unknown): string[] =>
  nodes(node(list).patterns)
    .map((p) => Object.entries(p).map(([kind, value]) => `${kind}:${String(value)}`)[0] ?? "")
    .sort();

/** Compose's `${NAME:-default}` resolved to its default. */
const composeDefault = (value: unknown): string =>
  String(value ?? "").replace(/\$\{[A-Z_]+:-([^}]*)\}/g, (_all, fallback: string) => fallback);

const env = (service: string): Node => node(node(services[service]).environment);

/** The container ports a service publishes on the host (short and long syntax). */
function publishedContainerPorts(service: string): number[] {
  return (
    (node(services[service]).ports as unknown[] | undefined)?.map((entry) => {
      if (typeof entry === "object" && entry !== null) return Number((entry as Node).target);
      const parts = String(entry).split("/")[0]?.split(":") ?? [];
      return Number(parts[parts.length - 1]);
    }) ?? []
  );
}

/** Seconds of a protobuf duration such as "0.25s". */
const seconds = (value: unknown): number =>
  Number(/^(\d+(?:\.\d+)?)s$/.exec(String(value))?.[1] ?? Number.NaN);

describe("envoy/envoy.yaml", () => {
  it("listens on port 10000 with a single HTTP connection manager", () => {
    expect(node(node(listener.address).socket_address).port_value).toBe(10000);
    expect(nodes(resources.listeners)).toHaveLength(1);
    expect(String(hcm["@type"])).toMatch(/HttpConnectionManager$/);
  });

  it("routes /auth/ and /me to tollgate's public port 8080 and /api/ to the upstream on 8000", () => {
    expect(endpointsOf(node(routeFor({ prefix: "/auth/" })?.route).cluster)).toEqual(["tollgate:8080"]);
    expect(endpointsOf(node(routeFor({ path: "/me" })?.route).cluster)).toEqual(["tollgate:8080"]);
    expect(endpointsOf(node(routeFor({ prefix: "/api/" })?.route).cluster)).toEqual(["upstream:8000"]);
  });

  it("skips the check only on /health and /ready, which go to tollgate's public port", () => {
    const unchecked = routes.filter(
      (r) => node(node(r.typed_per_filter_config)["envoy.filters.http.ext_authz"]).disabled === true,
    );
    expect(unchecked.map((r) => r.match)).toEqual([{ path: "/health" }, { path: "/ready" }]);
    for (const r of unchecked) expect(endpointsOf(node(r.route).cluster)).toEqual(["tollgate:8080"]);
  });

  it("asks tollgate:9191 at /ext_authz and fails closed with 503", () => {
    expect(endpointsOf(node(httpService.server_uri).cluster)).toEqual(["tollgate:9191"]);
    expect(httpService.path_prefix).toBe("/ext_authz");
    expect(extAuthz.failure_mode_allow).toBe(false);
    expect(node(extAuthz.status_on_error).code).toBe("ServiceUnavailable");
    expect(extAuthz.with_request_body).toBeUndefined();
  });

  it("waits longer for a check than tollgate waits for Redis, so tollgate answers first", () => {
    const redisTimeoutMs = Number(composeDefault(env("tollgate").REDIS_TIMEOUT_MS) || 100);
    const checkTimeout = seconds(node(httpService.server_uri).timeout);
    expect(checkTimeout * 1000).toBeGreaterThan(redisTimeoutMs);
    expect(checkTimeout).toBeLessThanOrEqual(1);
  });

  it("copies exactly the client headers the check needs", () => {
    expect(patterns(extAuthz.allowed_headers)).toEqual(
      ["authorization", "x-api-key", "x-forwarded-for", "x-request-id", "user-agent", "x-device-name"]
        .map((h) => `exact:${h}`)
        .sort(),
    );
    expect(node(httpService.authorization_request).allowed_headers).toBeUndefined();
  });

  it("sends the peer address in x-tollgate-client-ip, a header the client cannot supply", () => {
    expect(node(httpService.authorization_request).headers_to_add).toEqual([
      { key: "x-tollgate-client-ip", value: "%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT%" },
    ]);
    expect(patterns(extAuthz.allowed_headers)).not.toContain("exact:x-tollgate-client-ip");
  });

  it("passes identity upstream and the contract's limit and auth headers to the client", () => {
    expect(patterns(authzResponse.allowed_upstream_headers)).toEqual([
      "exact:x-session-id",
      "exact:x-user-id",
      "exact:x-user-tier",
    ]);
    expect(patterns(authzResponse.allowed_client_headers)).toEqual(
      [
        "exact:retry-after",
        "prefix:x-ratelimit-",
        "prefix:ratelimit",
        "exact:www-authenticate",
        "exact:content-type",
      ].sort(),
    );
    expect(patterns(authzResponse.allowed_client_headers_on_success)).toEqual([
      "prefix:ratelimit",
      "prefix:x-ratelimit-",
    ]);
  });

  it("strips client identity, client-address, method-override and rerouting headers before ext_authz runs, and routes last", () => {
    const mutationIndex = httpFilters.findIndex((f) => f.name === "envoy.filters.http.header_mutation");
    expect(mutationIndex).toBeGreaterThanOrEqual(0);
    expect(mutationIndex).toBeLessThan(extAuthzIndex);
    const removed = nodes(node(node(httpFilters[mutationIndex]?.typed_config).mutations).request_mutations);
    expect(removed.map((m) => m.remove).sort()).toEqual([
      "x-http-method",
      "x-http-method-override",
      "x-method-override",
      "x-original-url",
      "x-rewrite-url",
      "x-session-id",
      "x-tollgate-client-ip",
      "x-user-id",
      "x-user-tier",
    ]);
    expect(httpFilters.at(-1)?.name).toBe("envoy.filters.http.router");
  });

  it("appends the TCP peer to X-Forwarded-For as the one trusted hop that tollgate's public API expects", () => {
    expect(hcm.use_remote_address).toBe(true);
    expect(hcm.xff_num_trusted_hops ?? 0).toBe(0);
    expect(composeDefault(env("tollgate").TRUSTED_PROXY_HOPS)).toBe("1");
  });
});

/** Keys a message of Envoy's v3 API has, as far as envoy-grpc.yaml may use them (checked against the protos). */
const API_KEYS: Record<string, readonly string[]> = {
  ExtAuthz: [
    "@type",
    "grpc_service",
    "http_service",
    "transport_api_version",
    "failure_mode_allow",
    "failure_mode_allow_header_add",
    "with_request_body",
    "clear_route_cache",
    "status_on_error",
    "validate_mutations",
    "metadata_context_namespaces",
    "include_peer_certificate",
    "stat_prefix",
    "allowed_headers",
    "disallowed_headers",
    "include_tls_session",
    "encode_raw_headers",
  ],
  GrpcService: ["envoy_grpc", "google_grpc", "timeout", "initial_metadata"],
  EnvoyGrpc: ["cluster_name", "authority", "retry_policy"],
  HealthCheck: [
    "timeout",
    "interval",
    "initial_jitter",
    "interval_jitter",
    "unhealthy_threshold",
    "healthy_threshold",
    "reuse_connection",
    "grpc_health_check",
    "no_traffic_interval",
    "unhealthy_interval",
  ],
  GrpcHealthCheck: ["service_name", "authority"],
  KeepaliveSettings: ["interval", "timeout", "interval_jitter", "connection_idle_interval"],
  // envoy.extensions.filters.http.ratelimit.v3.RateLimit (rate_limit.proto, fields 1 to 17).
  RateLimitFilter: [
    "@type",
    "domain",
    "stage",
    "request_type",
    "timeout",
    "failure_mode_deny",
    "rate_limited_as_resource_exhausted",
    "rate_limit_service",
    "enable_x_ratelimit_headers",
    "disable_x_envoy_ratelimited_header",
    "rate_limited_status",
    "response_headers_to_add",
    "status_on_error",
    "stat_prefix",
    "filter_enabled",
    "filter_enforced",
    "failure_mode_deny_percent",
    "rate_limits",
  ],
  // envoy.config.ratelimit.v3.RateLimitServiceConfig (config/ratelimit/v3/rls.proto).
  RateLimitServiceConfig: ["grpc_service", "transport_api_version"],
  // envoy.config.route.v3.RateLimit and its Action (route_components.proto).
  RouteRateLimit: ["stage", "disable_key", "actions", "limit", "hits_addend", "apply_on_stream_done"],
  RateLimitAction: [
    "source_cluster",
    "destination_cluster",
    "request_headers",
    "query_parameters",
    "remote_address",
    "generic_key",
    "header_value_match",
    "dynamic_metadata",
    "metadata",
    "extension",
    "masked_remote_address",
    "query_parameter_value_match",
  ],
  RequestHeaders: ["header_name", "descriptor_key", "skip_if_absent"],
  GenericKey: ["descriptor_value", "descriptor_key"],
  HeaderValueMatch: ["descriptor_key", "descriptor_value", "expect_match", "headers"],
  HeaderMatcher: [
    "name",
    "exact_match",
    "safe_regex_match",
    "range_match",
    "present_match",
    "prefix_match",
    "suffix_match",
    "contains_match",
    "string_match",
    "invert_match",
    "treat_missing_header_as_empty",
  ],
};

/** Keys of envoyproxy/ratelimit's config YAML (its validKeys), and tollgate's additions to it. */
const RLS_CONFIG_KEYS = {
  root: ["domain", "descriptors", "all_or_none"],
  descriptor: [
    "key",
    "value",
    "rate_limit",
    "descriptors",
    "shadow_mode",
    "quota_mode",
    "detailed_metric",
    "value_to_metric",
    "share_threshold",
    "metadata",
  ],
  rateLimit: ["unit", "requests_per_unit", "unlimited", "name", "replaces", "algorithm", "unit_multiplier"],
} as const;
/** envoy.service.ratelimit.v3.RateLimitResponse.RateLimit.Unit without UNKNOWN, as the YAML writes them. */
const RLS_UNITS = ["second", "minute", "hour", "day", "week", "month", "year"];
const RLS_ALGORITHMS = ["fixed-window", "sliding-log", "sliding-counter", "gcra"];

const unknownKeys = (value: unknown, message: string): string[] =>
  Object.keys(node(value)).filter((key) => !(API_KEYS[message] ?? []).includes(key));

describe("envoy/envoy-grpc.yaml", () => {
  const grpcService = node(grpcEnvoy.extAuthz.grpc_service);
  const grpcClusterName = node(grpcService.envoy_grpc).cluster_name;
  const grpcCluster = grpcEnvoy.clusters.find((c) => c.name === grpcClusterName);
  const protocolOptions = node(
    node(grpcCluster?.typed_extension_protocol_options)[
      "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
    ],
  );
  const http2 = node(node(protocolOptions.explicit_http_config).http2_protocol_options);
  const healthChecks = nodes(grpcCluster?.health_checks);

  it("is envoy.yaml's edge with another check: same admin, listener, routes, replies, filters around it and upstreams", () => {
    const http = load("envoy/envoy.yaml");
    const grpc = load("envoy/envoy-grpc.yaml");
    expect(grpc.admin).toEqual(http.admin);
    const { filter_chains: grpcChains, ...grpcListener } = grpcEnvoy.listener;
    const { filter_chains: httpChains, ...httpListener } = listener;
    expect(grpcListener).toEqual(httpListener);
    // The connection manager differs only in its filters and its access log format.
    const { http_filters: _gf, access_log: _ga, ...grpcHcm } = grpcEnvoy.hcm;
    const { http_filters: _hf, access_log: _ha, ...httpHcm } = hcm;
    expect(grpcHcm).toEqual(httpHcm);
    expect(grpcEnvoy.httpFilters.map((f) => f.name)).toEqual(httpFilters.map((f) => f.name));
    expect(grpcEnvoy.httpFilters[0]).toEqual(httpFilters[0]); // header_mutation, before ext_authz
    expect(grpcEnvoy.httpFilters.at(-1)).toEqual(httpFilters.at(-1)); // the router, last
    for (const name of ["tollgate_public", "upstream"]) {
      expect(
        grpcEnvoy.clusters.find((c) => c.name === name),
        name,
      ).toEqual(nodes(resources.clusters).find((c) => c.name === name));
    }
    expect(grpcEnvoy.clusters.map((c) => c.name).sort()).toEqual([
      "tollgate_grpc",
      "tollgate_public",
      "upstream",
    ]);
  });

  it("calls Authorization/Check (API v3) through Envoy's gRPC client, without the HTTP service's settings", () => {
    expect(grpcEnvoy.extAuthz.transport_api_version).toBe("V3");
    expect(Object.keys(grpcService)).toContain("envoy_grpc");
    expect(grpcEnvoy.extAuthz.http_service).toBeUndefined();
    // Unset, Envoy sends every request header to a gRPC service; the header_mutation filter has
    // already removed the identity and client-address headers a client sent.
    expect(grpcEnvoy.extAuthz.allowed_headers).toBeUndefined();
    expect(unknownKeys(grpcEnvoy.extAuthz, "ExtAuthz")).toEqual([]);
    expect(unknownKeys(grpcService, "GrpcService")).toEqual([]);
    expect(unknownKeys(grpcService.envoy_grpc, "EnvoyGrpc")).toEqual([]);
  });

  it("sends the check to a cluster that speaks HTTP/2 to tollgate's GRPC_PORT (8081)", () => {
    expect(grpcCluster).toBeDefined();
    expect(String(protocolOptions["@type"])).toMatch(/\.upstreams\.http\.v3\.HttpProtocolOptions$/);
    expect(node(protocolOptions.explicit_http_config).http2_protocol_options).toBeDefined();
    expect(node(protocolOptions.explicit_http_config).http_protocol_options).toBeUndefined();
    const grpcPort = composeDefault(env("tollgate").GRPC_PORT) || "8081";
    expect(grpcEnvoy.endpointsOf(grpcClusterName)).toEqual([`tollgate:${grpcPort}`]);
    expect(node(services.tollgate).expose).toContain(grpcPort);
  });

  it("fails closed with 503 and waits longer for a check than tollgate waits for Redis", () => {
    expect(grpcEnvoy.extAuthz.failure_mode_allow).toBe(false);
    expect(node(grpcEnvoy.extAuthz.status_on_error).code).toBe("ServiceUnavailable");
    const redisTimeoutMs = Number(composeDefault(env("tollgate").REDIS_TIMEOUT_MS) || 100);
    const checkTimeout = seconds(grpcService.timeout);
    expect(checkTimeout * 1000).toBeGreaterThan(redisTimeoutMs);
    expect(checkTimeout).toBeLessThanOrEqual(1);
    expect(grpcService.timeout).toBe(node(httpService.server_uri).timeout);
  });

  it("health-checks the Authorization service over grpc.health.v1 and pings idle HTTP/2 connections", () => {
    expect(healthChecks).toHaveLength(1);
    const check = node(healthChecks[0]);
    expect(node(check.grpc_health_check).service_name).toBe("envoy.service.auth.v3.Authorization");
    // Required by the HealthCheck message.
    for (const field of ["timeout", "interval", "unhealthy_threshold", "healthy_threshold"])
      expect(check[field], field).toBeDefined();
    expect(seconds(check.timeout)).toBeLessThan(seconds(check.interval));
    expect(unknownKeys(check, "HealthCheck")).toEqual([]);
    expect(unknownKeys(check.grpc_health_check, "GrpcHealthCheck")).toEqual([]);
    const keepalive = node(http2.connection_keepalive);
    expect(seconds(keepalive.timeout)).toBeGreaterThan(0);
    expect(seconds(keepalive.timeout)).toBeLessThan(seconds(keepalive.interval));
    expect(unknownKeys(keepalive, "KeepaliveSettings")).toEqual([]);
  });

  it("logs the check's decision from the dynamic metadata ext_authz sets", () => {
    const format = String(
      node(node(node(nodes(grpcEnvoy.hcm.access_log)[0]?.typed_config).log_format).text_format_source)
        .inline_string,
    );
    for (const key of ["user_id", "tier", "category", "decision", "reason"])
      expect(format).toContain(`%DYNAMIC_METADATA(envoy.filters.http.ext_authz:${key})%`);
  });
});

/** A descriptor entry a rate limit action appends: its key, and its value when the action fixes it. */
type DescriptorEntry = { key: string; value?: string };

/** The entry one action of a route's rate_limits appends (route_components.proto, RateLimit.Action). */
function entryOf(action: Node): DescriptorEntry {
  if (action.remote_address !== undefined) return { key: "remote_address" };
  const headers = node(action.request_headers);
  if (action.request_headers !== undefined) return { key: String(headers.descriptor_key) };
  const generic = node(action.generic_key);
  if (action.generic_key !== undefined)
    return { key: String(generic.descriptor_key ?? "generic_key"), value: String(generic.descriptor_value) };
  const match = node(action.header_value_match);
  if (action.header_value_match !== undefined)
    return { key: String(match.descriptor_key ?? "header_match"), value: String(match.descriptor_value) };
  throw new Error(`an action this test does not know: ${JSON.stringify(action)}`);
}

/**
 * The config descriptor a descriptor ends at, matched as envoyproxy/ratelimit matches: at each level
 * the entry with the same key and value, else the entry with the key and no value. An entry whose value
 * comes from the request (an address, a header) needs the key-only entry.
 */
function configDescriptorFor(descriptors: Node[], entries: DescriptorEntry[]): Node | undefined {
  let level = descriptors;
  let found: Node | undefined;
  for (const entry of entries) {
    found =
      (entry.value !== undefined
        ? level.find((d) => d.key === entry.key && d.value === entry.value)
        : undefined) ?? level.find((d) => d.key === entry.key && d.value === undefined);
    if (found === undefined) return undefined;
    level = nodes(found.descriptors);
  }
  return found;
}

describe("envoy/envoy-ratelimit.yaml and envoy/ratelimit-config/", () => {
  const filterIndex = rlsEnvoy.httpFilters.findIndex((f) => f.name === "envoy.filters.http.ratelimit");
  const filter = node(rlsEnvoy.httpFilters[filterIndex]?.typed_config);
  const service = node(filter.rate_limit_service);
  const grpcService = node(service.grpc_service);
  const clusterName = node(grpcService.envoy_grpc).cluster_name;
  const cluster = rlsEnvoy.clusters.find((c) => c.name === clusterName);
  const protocolOptions = node(
    node(cluster?.typed_extension_protocol_options)["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"],
  );
  const config = load("envoy/ratelimit-config/config/edge.yaml");
  const rateLimited = rlsEnvoy.routes.filter((r) => nodes(node(r.route).rate_limits).length > 0);

  it("is envoy-grpc.yaml's edge with the rate limit filter between the check and the router", () => {
    const grpc = load("envoy/envoy-grpc.yaml");
    expect(load("envoy/envoy-ratelimit.yaml").admin).toEqual(grpc.admin);
    const { filter_chains: _rc, ...rlsListener } = rlsEnvoy.listener;
    const { filter_chains: _gc, ...grpcListener } = grpcEnvoy.listener;
    expect(rlsListener).toEqual(grpcListener);
    // The connection manager differs in its filters, its routes' rate_limits and two more local replies.
    const {
      http_filters: _rf,
      route_config: rlsRoutes,
      local_reply_config: rlsReplies,
      ...rlsHcm
    } = rlsEnvoy.hcm;
    const {
      http_filters: _gf,
      route_config: grpcRoutes,
      local_reply_config: grpcReplies,
      ...grpcHcm
    } = grpcEnvoy.hcm;
    expect(rlsHcm).toEqual(grpcHcm);
    const withoutLimits = (routes: Node[]) =>
      routes.map((r) => {
        const { rate_limits: _limits, ...action } = node(r.route);
        return { ...r, route: action };
      });
    expect(withoutLimits(rlsEnvoy.routes)).toEqual(withoutLimits(grpcEnvoy.routes));
    expect(node(rlsRoutes).name).toBe(node(grpcRoutes).name);
    const grpcMappers = nodes(node(grpcReplies).mappers);
    for (const mapper of grpcMappers) expect(nodes(node(rlsReplies).mappers)).toContainEqual(mapper);
    const flags = nodes(node(rlsReplies).mappers).flatMap(
      (m) => (node(node(m.filter).response_flag_filter).flags as string[] | undefined) ?? [],
    );
    expect(flags).toEqual(expect.arrayContaining(["RL", "RLSE"]));
    expect(rlsEnvoy.httpFilters.map((f) => f.name)).toEqual([
      "envoy.filters.http.header_mutation",
      "envoy.filters.http.ext_authz",
      "envoy.filters.http.ratelimit",
      "envoy.filters.http.router",
    ]);
    // The filters around it are envoy-grpc.yaml's, the check included but for the API key header it
    // keeps for the api_key descriptor (tested below).
    const keeping = (filter: Node | undefined) => {
      const { decoder_header_mutation_rules: _rules, ...config } = node(filter?.typed_config);
      return { ...filter, typed_config: config };
    };
    for (const name of [
      "envoy.filters.http.header_mutation",
      "envoy.filters.http.ext_authz",
      "envoy.filters.http.router",
    ])
      expect(keeping(rlsEnvoy.httpFilters.find((f) => f.name === name)), name).toEqual(
        keeping(grpcEnvoy.httpFilters.find((f) => f.name === name)),
      );
    for (const name of ["tollgate_grpc", "tollgate_public", "upstream"])
      expect(
        rlsEnvoy.clusters.find((c) => c.name === name),
        name,
      ).toEqual(grpcEnvoy.clusters.find((c) => c.name === name));
    expect(rlsEnvoy.clusters.map((c) => c.name).sort()).toEqual([
      "tollgate_grpc",
      "tollgate_public",
      "tollgate_rls",
      "upstream",
    ]);
  });

  it("calls RateLimitService (API v3) through Envoy's gRPC client, with field names of Envoy's API", () => {
    expect(String(filter["@type"])).toBe(
      "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit",
    );
    expect(service.transport_api_version).toBe("V3");
    expect(Object.keys(grpcService)).toEqual(["envoy_grpc"]);
    expect(unknownKeys(filter, "RateLimitFilter")).toEqual([]);
    expect(unknownKeys(service, "RateLimitServiceConfig")).toEqual([]);
    expect(unknownKeys(grpcService, "GrpcService")).toEqual([]);
    expect(unknownKeys(grpcService.envoy_grpc, "EnvoyGrpc")).toEqual([]);
    expect(Number(filter.stage ?? 0)).toBeLessThanOrEqual(10);
    expect(["internal", "external", "both", "", undefined]).toContain(filter.request_type);
    expect(["OFF", undefined]).toContain(filter.enable_x_ratelimit_headers);
  });

  it("sends the calls to a cluster of their own that speaks HTTP/2 to tollgate's GRPC_PORT (8081)", () => {
    expect(clusterName).toBe("tollgate_rls");
    expect(node(protocolOptions.explicit_http_config).http2_protocol_options).toBeDefined();
    expect(node(protocolOptions.explicit_http_config).http_protocol_options).toBeUndefined();
    const grpcPort = composeDefault(env("tollgate").GRPC_PORT) || "8081";
    expect(rlsEnvoy.endpointsOf(clusterName)).toEqual([`tollgate:${grpcPort}`]);
    const checks = nodes(cluster?.health_checks);
    expect(checks).toHaveLength(1);
    expect(node(node(checks[0]).grpc_health_check).service_name).toBe(
      "envoy.service.ratelimit.v3.RateLimitService",
    );
    expect(unknownKeys(checks[0], "HealthCheck")).toEqual([]);
    expect(
      unknownKeys(
        node(node(protocolOptions.explicit_http_config).http2_protocol_options).connection_keepalive,
        "KeepaliveSettings",
      ),
    ).toEqual([]);
  });

  it("waits Envoy's default 20 ms, more than tollgate's RLS_TIMEOUT_MS, and fails open", () => {
    const rlsTimeoutMs = Number(composeDefault(env("tollgate").RLS_TIMEOUT_MS) || 15);
    expect(seconds(filter.timeout) * 1000).toBeCloseTo(20, 6);
    expect(seconds(filter.timeout) * 1000).toBeGreaterThan(rlsTimeoutMs);
    expect(filter.failure_mode_deny).toBe(false);
    expect(node(filter.status_on_error).code).toBe("ServiceUnavailable");
  });

  it("builds descriptors with actions and fields of Envoy's API on /auth/ and /api/ only", () => {
    expect(rateLimited.map((r) => r.match)).toEqual([{ prefix: "/auth/" }, { prefix: "/api/" }]);
    for (const route of rateLimited)
      for (const limit of nodes(node(route.route).rate_limits)) {
        expect(unknownKeys(limit, "RouteRateLimit")).toEqual([]);
        expect(Number(limit.stage ?? 0)).toBe(Number(filter.stage ?? 0));
        for (const action of nodes(limit.actions)) {
          expect(Object.keys(action)).toHaveLength(1); // a oneof
          expect(unknownKeys(action, "RateLimitAction")).toEqual([]);
          expect(unknownKeys(action.request_headers, "RequestHeaders")).toEqual([]);
          expect(unknownKeys(action.generic_key, "GenericKey")).toEqual([]);
          expect(unknownKeys(action.header_value_match, "HeaderValueMatch")).toEqual([]);
          for (const matcher of nodes(node(action.header_value_match).headers))
            expect(unknownKeys(matcher, "HeaderMatcher")).toEqual([]);
        }
      }
  });

  it("matches paths in header_value_match in any case, as the upstream and tollgate's check route them", () => {
    // Envoy compares :path as sent (normalize_path does not fold case): POST /api/Orders reached the
    // orders handler of a case-insensitive upstream without the order_write descriptor.
    const pathMatchers = rateLimited.flatMap((r) =>
      nodes(node(r.route).rate_limits).flatMap((limit) =>
        nodes(limit.actions).flatMap((a) =>
          nodes(node(a.header_value_match).headers).filter((h) => h.name === ":path"),
        ),
      ),
    );
    expect(pathMatchers.length).toBeGreaterThan(0);
    for (const matcher of pathMatchers) expect(node(matcher.string_match).ignore_case).toBe(true);
  });

  it("names the example config's domain, which has a limit for every descriptor the routes build", () => {
    expect(filter.domain).toBe("tollgate-edge");
    expect(config.domain).toBe(filter.domain);
    const descriptors = nodes(config.descriptors);
    const built = rateLimited.flatMap((r) =>
      nodes(node(r.route).rate_limits).map((limit) => nodes(limit.actions).map(entryOf)),
    );
    expect(built.length).toBeGreaterThanOrEqual(4);
    for (const entries of built) {
      const found = configDescriptorFor(descriptors, entries);
      expect(found?.rate_limit, JSON.stringify(entries)).toBeDefined();
    }
    // Every key the actions produce is a key of the config, and the other way round.
    const configKeys = new Set<string>();
    const walk = (list: Node[]) => {
      for (const d of list) {
        configKeys.add(String(d.key));
        walk(nodes(d.descriptors));
      }
    };
    walk(descriptors);
    expect([...new Set(built.flat().map((e) => e.key))].sort()).toEqual([...configKeys].sort());
  });

  it("keeps the headers an allow removes until the router when a descriptor reads them (the API key)", () => {
    // ext_authz applies an allow's headers_to_remove before the next filter runs: a descriptor on a
    // header tollgate names for removal would find nothing and be dropped (no limit per API key).
    const removable = apiKeyHeaders("x-client-key")({ authorization: "ApiKey k", apiKey: "k" })?.names ?? [];
    expect(removable).toEqual(["x-client-key", "authorization"]);
    const bare = { host: "127.0.0.1", port: 1, ipv6: false };
    const addresses = Object.fromEntries(
      ["check", "grpc", "public", "upstream", "listen", "admin"].map((k) => [k, bare]),
    ) as Record<string, Address>;
    const shipped = { file: load("envoy/envoy-ratelimit.yaml"), header: "x-api-key" };
    const rendered = {
      file: parse(renderEnvoyConfig("ratelimit", addresses, "X-Client-Key")) as Node,
      header: "x-client-key",
    };
    for (const { file, header } of [shipped, rendered]) {
      const parts = envoyParts(file);
      const named = removable.map((name) => (name === "x-client-key" ? header : name));
      const read = parts.routes.flatMap((r) =>
        nodes(node(r.route).rate_limits).flatMap((limit) =>
          nodes(limit.actions).map((a) => String(node(a.request_headers).header_name ?? "")),
        ),
      );
      expect(read, header).toContain(header);
      const rules = node(parts.extAuthz.decoder_header_mutation_rules);
      const kept = new RegExp(`^(?:${String(node(rules.disallow_expression).regex ?? "(?!)")})$`);
      expect(rules.disallow_is_error, header).not.toBe(true);
      const vhost = node(nodes(node(parts.hcm.route_config).virtual_hosts)[0]);
      for (const name of named) {
        // Kept by the check when a descriptor reads it, and then removed by the router (after the
        // rate limit filter), so the upstream never gets it either; otherwise the check removes it.
        expect(kept.test(name), name).toBe(read.includes(name));
        expect(nodes(vhost.request_headers_to_remove).includes(name as never), name).toBe(
          read.includes(name),
        );
      }
    }
  });

  it("writes the config in envoyproxy/ratelimit's format with tollgate's additions only", () => {
    expect(
      Object.keys(config).filter((k) => !(RLS_CONFIG_KEYS.root as readonly string[]).includes(k)),
    ).toEqual([]);
    const limits: Node[] = [];
    const walk = (list: Node[]) => {
      for (const d of list) {
        expect(
          Object.keys(d).filter((k) => !(RLS_CONFIG_KEYS.descriptor as readonly string[]).includes(k)),
        ).toEqual([]);
        expect(typeof d.key).toBe("string");
        if (d.rate_limit !== undefined) limits.push(node(d.rate_limit));
        walk(nodes(d.descriptors));
      }
    };
    walk(nodes(config.descriptors));
    for (const limit of limits) {
      expect(
        Object.keys(limit).filter((k) => !(RLS_CONFIG_KEYS.rateLimit as readonly string[]).includes(k)),
      ).toEqual([]);
      if (limit.unlimited === true) {
        // The reference refuses a unit beside unlimited.
        expect(limit.unit).toBeUndefined();
        continue;
      }
      expect(RLS_UNITS).toContain(limit.unit);
      expect(Number.isInteger(limit.requests_per_unit)).toBe(true);
      if (limit.algorithm !== undefined) expect(RLS_ALGORITHMS).toContain(limit.algorithm);
      if (limit.unit_multiplier !== undefined) expect(Number(limit.unit_multiplier)).toBeGreaterThan(1);
    }
    // The example shows each addition and a nested limit.
    expect(limits.some((l) => l.algorithm === "sliding-log")).toBe(true);
    expect(limits.some((l) => l.unit_multiplier !== undefined)).toBe(true);
    expect(nodes(config.descriptors).some((d) => nodes(d.descriptors).some((n) => n.rate_limit))).toBe(true);
  });
});

describe("docker-compose.yml", () => {
  it("runs Redis with the append-only file and a health check", () => {
    const redis = node(services.redis);
    expect((redis.command as string[]).join(" ")).toMatch(/--appendonly yes/);
    expect(node(redis.healthcheck).test).toBeDefined();
    expect(node(node(node(services.tollgate).depends_on).redis).condition).toBe("service_healthy");
  });

  it("runs tollgate, the upstream, Envoy on 10000, Prometheus and Grafana, with k6 only under the load profile", () => {
    expect(Object.keys(services).sort()).toEqual([
      "envoy",
      "envoy-grpc",
      "envoy-ratelimit",
      "grafana",
      "k6",
      "prometheus",
      "redis",
      "tollgate",
      "upstream",
    ]);
    expect(publishedContainerPorts("envoy")).toContain(10000);
    expect(node(services.envoy).ports).toContain("10000:10000");
    for (const name of ["redis", "tollgate", "upstream", "envoy", "prometheus", "grafana"]) {
      expect(node(services[name]).profiles, name).toBeUndefined();
    }
    expect(node(services.k6).profiles).toEqual(["load"]);
    expect(env("k6").BASE_URL).toBe("http://envoy:10000");
  });

  it("runs envoy-grpc only under the grpc profile, with envoy/envoy-grpc.yaml, on host port 10001", () => {
    const service = node(services["envoy-grpc"]);
    expect(service.profiles).toEqual(["grpc"]);
    expect(service.image).toBe(node(services.envoy).image);
    expect(service.volumes).toContain("./envoy/envoy-grpc.yaml:/etc/envoy/envoy.yaml:ro");
    expect(service.ports).toContain("10001:10000");
    // Its admin on the host's loopback only, like the other Envoy's.
    for (const entry of service.ports as string[])
      if (entry.endsWith(":9901")) expect(entry).toMatch(/^127\.0\.0\.1:/);
    expect(node(node(service.depends_on).tollgate).condition).toBe("service_healthy");
    const grpcProfiled = Object.entries(services).filter(([, s]) =>
      ((node(s).profiles as string[] | undefined) ?? []).includes("grpc"),
    );
    expect(grpcProfiled.map(([name]) => name)).toEqual(["envoy-grpc"]);
  });

  it("runs envoy-ratelimit only under the ratelimit profile, on host port 10002, with the example config mounted into tollgate", () => {
    const service = node(services["envoy-ratelimit"]);
    expect(service.profiles).toEqual(["ratelimit"]);
    expect(service.image).toBe(node(services.envoy).image);
    expect(service.volumes).toContain("./envoy/envoy-ratelimit.yaml:/etc/envoy/envoy.yaml:ro");
    expect(service.ports).toContain("10002:10000");
    for (const entry of service.ports as string[])
      if (entry.endsWith(":9901")) expect(entry).toMatch(/^127\.0\.0\.1:/);
    expect(node(node(service.depends_on).tollgate).condition).toBe("service_healthy");
    const profiled = Object.entries(services).filter(([, s]) =>
      ((node(s).profiles as string[] | undefined) ?? []).includes("ratelimit"),
    );
    expect(profiled.map(([name]) => name)).toEqual(["envoy-ratelimit"]);
    // Every host port of the Envoys differs.
    const hostPorts = ["envoy", "envoy-grpc", "envoy-ratelimit"].flatMap((name) =>
      (node(services[name]).ports as string[]).map((p) => p.split(":").slice(0, -1).join(":")),
    );
    expect(new Set(hostPorts).size).toBe(hostPorts.length);
    // The config folder is mounted always; RLS_CONFIG is empty (the RLS not offered) unless the
    // profile's command sets it, to the mounted config/ folder.
    const mount = (node(services.tollgate).volumes as string[]).find((v) =>
      v.startsWith("./envoy/ratelimit-config:"),
    );
    expect(mount).toMatch(/^\.\/envoy\/ratelimit-config:\/etc\/tollgate\/ratelimit:ro$/);
    expect(composeDefault(env("tollgate").RLS_CONFIG)).toBe("");
    const text = readFileSync(new URL("docker-compose.yml", ROOT), "utf8");
    expect(text).toContain("RLS_CONFIG=/etc/tollgate/ratelimit/config docker compose --profile ratelimit up");
    expect(readFileSync(new URL("docs/rls.md", ROOT), "utf8")).toContain(
      "RLS_CONFIG=/etc/tollgate/ratelimit/config docker compose --profile ratelimit up",
    );
  });

  it("keeps tollgate's gRPC check port 8081 off the host and lists every exposed port in the image", () => {
    for (const [name] of Object.entries(services))
      expect(publishedContainerPorts(name), name).not.toContain(8081);
    const exposed = (node(services.tollgate).expose as string[]).map(Number);
    expect(exposed).toContain(8081);
    const dockerfile = readFileSync(new URL("../../Dockerfile", import.meta.url), "utf8");
    const imagePorts = (/^EXPOSE (.+)$/m.exec(dockerfile)?.[1] ?? "").split(/\s+/).map(Number);
    for (const port of exposed) expect(imagePorts, String(port)).toContain(port);
  });

  it("mounts envoy/envoy.yaml into an Envoy image of the supported 1.38 line", () => {
    const service = node(services.envoy);
    // A line's latest patch, never a floating tag or 1.37.0 (denied responses lost their headers).
    expect(String(service.image)).toMatch(/^envoyproxy\/envoy:v1\.38(-latest|\.\d+)$/);
    expect(service.volumes).toContain("./envoy/envoy.yaml:/etc/envoy/envoy.yaml:ro");
  });

  it("builds the tollgate image once and runs the upstream from it without pulling", () => {
    const builders = Object.entries(services).filter(([, service]) => node(service).build !== undefined);
    expect(builders.map(([name]) => name)).toEqual(["tollgate"]);
    const tollgate = node(services.tollgate);
    const upstream = node(services.upstream);
    expect(upstream.image).toBe(tollgate.image);
    expect(upstream.pull_policy).toBe("never");
    expect(upstream.command).toEqual(["node", "dist/upstream/main.js"]);
  });

  it("keeps tollgate's check port 9191 and public port 8080 off the host", () => {
    expect(composeDefault(env("tollgate").CHECK_PORT) || "9191").toBe("9191");
    expect(composeDefault(env("tollgate").PORT) || "8080").toBe("8080");
    expect(publishedContainerPorts("tollgate")).not.toContain(9191);
    expect(publishedContainerPorts("tollgate")).not.toContain(8080);
    for (const [name] of Object.entries(services))
      expect(publishedContainerPorts(name), name).not.toContain(9191);
  });

  it("gives tollgate no JWT_SECRET fallback and binds the containers to their network interface", () => {
    expect(composeDefault(env("tollgate").JWT_SECRET)).toBe("");
    expect(env("tollgate").HOST).toBe("0.0.0.0");
    // Outside production tollgate and the upstream default to loopback, which a container cannot use.
    expect(readFileSync(new URL("../../Dockerfile", import.meta.url), "utf8")).toMatch(
      /^ENV HOST=0\.0\.0\.0$/m,
    );
  });

  it("runs the upstream on the port Envoy's upstream cluster uses", () => {
    expect(composeDefault(env("upstream").UPSTREAM_PORT) || "8000").toBe("8000");
    expect(endpointsOf("upstream")).toEqual(["upstream:8000"]);
  });

  it("has Prometheus scrape tollgate's admin port 9090", () => {
    const prometheus = node(services.prometheus);
    const mount = (prometheus.volumes as string[]).find((v) =>
      v.endsWith(":/etc/prometheus/prometheus.yml:ro"),
    );
    expect(mount).toBeDefined();
    const config = load(String(mount?.split(":")[0]).replace(/^\.\//, ""));
    const targets = nodes(config.scrape_configs).flatMap((job) =>
      nodes(job.static_configs).flatMap((c) => c.targets as string[]),
    );
    expect(targets).toContain("tollgate:9090");
    expect(composeDefault(env("tollgate").ADMIN_PORT) || "9090").toBe("9090");
  });
});

describe("docker-compose.cluster.yml", () => {
  // Compose resolves YAML merge keys (<<: *redis-node), as the yaml parser does when asked to.
  const cluster = parse(readFileSync(new URL("docker-compose.cluster.yml", ROOT), "utf8"), {
    merge: true,
  }) as Node;
  const clusterServices = node(cluster.services);
  const nodeNames = Object.keys(clusterServices).filter((name) => /^redis-node-\d$/.test(name));

  it("runs six cluster-enabled Redis nodes with the append-only file", () => {
    expect(nodeNames).toHaveLength(6);
    for (const name of nodeNames) {
      const args = (node(clusterServices[name]).command as string[]).join(" ");
      expect(args, name).toMatch(/--cluster-enabled yes/);
      expect(args, name).toMatch(/--appendonly yes/);
      expect(args, name).toMatch(/--cluster-require-full-coverage no/);
      expect(node(clusterServices[name]).healthcheck, name).toBeDefined();
    }
  });

  it("joins the six nodes into 3 masters with a replica each before tollgate starts", () => {
    const init = node(clusterServices["redis-cluster-init"]);
    const script = (init.command as string[]).join("\n");
    expect(script).toMatch(/redis-cli --cluster create \$\$nodes --cluster-replicas 1 --cluster-yes/);
    expect(script).toMatch(/for n in 1 2 3 4 5 6; do/);
    expect(Object.keys(node(init.depends_on)).sort()).toEqual([...nodeNames].sort());
    const dependsOn = node(node(clusterServices.tollgate).depends_on);
    expect(node(dependsOn["redis-cluster-init"]).condition).toBe("service_completed_successfully");
  });

  it("gives tollgate, merged over docker-compose.yml, a cluster of every node and no single Redis", () => {
    const merged: Record<string, string> = {};
    for (const [name, value] of Object.entries({
      ...env("tollgate"),
      ...node(node(clusterServices.tollgate).environment),
    }))
      merged[name] = composeDefault(value);
    const config = loadConfig(merged);
    expect(config.redis?.topology).toEqual({
      kind: "cluster",
      nodes: nodeNames.map((host) => ({ host, port: 6379 })),
    });
  });
});

describe("envoy/render.mjs's configurations, for an Envoy outside compose", () => {
  const names = Object.keys(CONFIGS) as ConfigName[];
  const parsed = (values: Record<string, string>): Record<string, Address> =>
    Object.fromEntries(
      Object.entries(values).map(([key, text]) => {
        const address = parseAddress(text);
        if (address === undefined) throw new Error(`not HOST:PORT: ${text}`);
        return [key, address];
      }),
    );
  const port = (name: string, fallback: string) => composeDefault(env("tollgate")[name]) || fallback;
  /** docker-compose.yml's addresses, which envoy/'s files name. */
  const COMPOSE = parsed({
    check: `tollgate:${port("CHECK_PORT", "9191")}`,
    grpc: `tollgate:${port("GRPC_PORT", "8081")}`,
    public: `tollgate:${port("PORT", "8080")}`,
    upstream: `upstream:${composeDefault(env("upstream").UPSTREAM_PORT) || "8000"}`,
    listen: "0.0.0.0:10000",
    admin: "0.0.0.0:9901",
  });
  /** A bare machine's, one of them IPv6. */
  const BARE = parsed({
    check: "127.0.0.1:19191",
    grpc: "[::1]:18081",
    public: "tollgate.internal:18080",
    upstream: "10.0.0.7:8000",
    listen: "127.0.0.1:10080",
    admin: "127.0.0.1:9901",
  });
  const socket = (a: Address) => ({ address: a.host, port_value: a.port });

  it.each(names)(
    "renders %s with compose's addresses into exactly envoy/'s file, so every test above holds for it",
    (name) => {
      expect(parse(renderEnvoyConfig(name, COMPOSE))).toEqual(load(`envoy/${CONFIGS[name].file}`));
    },
  );

  it.each(names)(
    "renders %s for a bare machine as envoy/'s file with the addresses alone changed",
    (name) => {
      const rendered = parse(renderEnvoyConfig(name, BARE)) as Node;
      const expected = structuredClone(load(`envoy/${CONFIGS[name].file}`));
      node(node(expected.admin).address).socket_address = socket(BARE.admin as Address);
      const resources = node(expected.static_resources);
      node(node(nodes(resources.listeners)[0]).address).socket_address = socket(BARE.listen as Address);
      const clusters = Object.entries(CONFIGS[name].clusters);
      for (const [clusterName, key] of clusters) {
        const cluster = node(nodes(resources.clusters).find((c) => c.name === clusterName));
        const lb = node(nodes(node(nodes(node(cluster.load_assignment).endpoints)[0]).lb_endpoints)[0]);
        node(node(lb.endpoint).address).socket_address = socket(BARE[key] as Address);
        if (BARE[key]?.ipv6) cluster.dns_lookup_family = "V6_ONLY";
      }
      expect(rendered).toEqual(expected);
      // Every cluster of the file that points at tollgate or the upstream is one render.mjs sets.
      const parts = envoyParts(rendered);
      for (const cluster of parts.clusters)
        expect(
          clusters.map(([c]) => c),
          String(cluster.name),
        ).toContain(cluster.name);
      expect(parts.endpointsOf("tollgate_public")).toEqual(["tollgate.internal:18080"]);
      expect(parts.endpointsOf("upstream")).toEqual(["10.0.0.7:8000"]);
    },
  );

  it("gives the Envoy harness rendered envoy.yaml and envoy-grpc.yaml it reads as it reads envoy/'s", () => {
    for (const name of ["http", "grpc"] as const) {
      const config = loadEnvoyConfig(renderEnvoyConfig(name, BARE));
      expect(config.listenerPort).toBe(10080);
      expect(config.clusters.get("tollgate_public")?.endpoints).toEqual([
        { address: "tollgate.internal", port: 18080 },
      ]);
    }
    expect(
      loadEnvoyConfig(renderEnvoyConfig("http", BARE)).clusters.get("tollgate_check")?.endpoints,
    ).toEqual([{ address: "127.0.0.1", port: 19191 }]);
  });

  it("is shown in the README and docs/envoy.md", () => {
    for (const doc of ["README.md", "docs/envoy.md"])
      expect(readFileSync(new URL(doc, ROOT), "utf8"), doc).toMatch(
        /node envoy\/render\.mjs \S+ --check-addr/,
      );
  });
});
