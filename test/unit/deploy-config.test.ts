// docker-compose.yml, docker-compose.cluster.yml, envoy/envoy.yaml and prometheus.yml checked against the contract's ports, paths and headers.
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { parse } from "yaml";
import { loadConfig } from "../../src/config/env.js";

type Node = Record<string, unknown>;
const ROOT = new URL("../../", import.meta.url);
const load = (path: string): Node => parse(readFileSync(new URL(path, ROOT), "utf8")) as Node;
const node = (value: unknown): Node => (value ?? {}) as Node;
const nodes = (value: unknown): Node[] => (Array.isArray(value) ? (value as Node[]) : []);

const envoy = load("envoy/envoy.yaml");
const compose = load("docker-compose.yml");
const services = node(compose.services);
const resources = node(envoy.static_resources);
const listener = nodes(resources.listeners)[0] ?? {};
const hcm = node(node(nodes(node(nodes(listener.filter_chains)[0]).filters)[0]).typed_config);
const httpFilters = nodes(hcm.http_filters);
const routes = nodes(node(nodes(node(hcm.route_config).virtual_hosts)[0]).routes);
const extAuthzIndex = httpFilters.findIndex((f) => f.name === "envoy.filters.http.ext_authz");
const extAuthz = node(httpFilters[extAuthzIndex]?.typed_config);
const httpService = node(extAuthz.http_service);
const authzResponse = node(httpService.authorization_response);

/** "host:port" of every endpoint of an Envoy cluster. */
function endpointsOf(clusterName: unknown): string[] {
  const cluster = nodes(resources.clusters).find((c) => c.name === clusterName);
  return nodes(node(cluster?.load_assignment).endpoints).flatMap((group) =>
    nodes(group.lb_endpoints).map((lb) => {
      const socket = node(node(node(lb.endpoint).address).socket_address);
      return `${String(socket.address)}:${String(socket.port_value)}`;
    }),
  );
}

function routeFor(match: Node): Node | undefined {
  return routes.find((r) => JSON.stringify(r.match) === JSON.stringify(match));
}

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
      ["authorization", "x-forwarded-for", "x-request-id", "user-agent", "x-device-name"]
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

  it("strips client identity and client-address headers before ext_authz runs, and routes last", () => {
    const mutationIndex = httpFilters.findIndex((f) => f.name === "envoy.filters.http.header_mutation");
    expect(mutationIndex).toBeGreaterThanOrEqual(0);
    expect(mutationIndex).toBeLessThan(extAuthzIndex);
    const removed = nodes(node(node(httpFilters[mutationIndex]?.typed_config).mutations).request_mutations);
    expect(removed.map((m) => m.remove).sort()).toEqual([
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

describe("docker-compose.yml", () => {
  it("runs Redis with the append-only file and a health check", () => {
    const redis = node(services.redis);
    expect((redis.command as string[]).join(" ")).toMatch(/--appendonly yes/);
    expect(node(redis.healthcheck).test).toBeDefined();
    expect(node(node(node(services.tollgate).depends_on).redis).condition).toBe("service_healthy");
  });

  it("runs tollgate, the upstream, Envoy on 10000 and Prometheus, with k6 only under the load profile", () => {
    expect(Object.keys(services).sort()).toEqual([
      "envoy",
      "k6",
      "prometheus",
      "redis",
      "tollgate",
      "upstream",
    ]);
    expect(publishedContainerPorts("envoy")).toContain(10000);
    expect(node(services.envoy).ports).toContain("10000:10000");
    for (const name of ["redis", "tollgate", "upstream", "envoy", "prometheus"]) {
      expect(node(services[name]).profiles, name).toBeUndefined();
    }
    expect(node(services.k6).profiles).toEqual(["load"]);
    expect(env("k6").BASE_URL).toBe("http://envoy:10000");
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
