// deploy/kubernetes/ (the kustomize base and its examples): every manifest parses and passes the
// Kubernetes API's schemas offline (test/support/kubernetes-schemas.ts); the kustomization lists what
// exists; the settings, ports, files and drain timing agree with src/ and docs/, so drift fails here.
import { mkdtempSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { parseAllDocuments } from "yaml";
import { loadConfig } from "../../src/config/env.js";
import { DEFAULT_POLICY_YAML, parsePolicy } from "../../src/policy/policy.js";
import { policyVersion } from "../../src/policy/policy-state.js";
import { loadRlsConfig } from "../../src/rls/load.js";
import { limitsFor } from "../../src/rls/match.js";
import { schemaProblems, typeProblems } from "../support/kubernetes-schemas.js";
import { rules } from "../support/observability.js";

type Node = Record<string, unknown>;
const node = (value: unknown): Node => (value ?? {}) as Node;
const nodes = (value: unknown): Node[] => (Array.isArray(value) ? (value as Node[]) : []);

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const BASE = join(ROOT, "deploy/kubernetes");
const read = (path: string) => readFileSync(join(ROOT, path), "utf8");

function yamlFiles(dir: string): string[] {
  return readdirSync(dir)
    .flatMap((name) => {
      const full = join(dir, name);
      if (statSync(full).isDirectory()) return yamlFiles(full);
      return /\.ya?ml$/.test(name) ? [full] : [];
    })
    .sort();
}

/** Every document of every YAML file under deploy/kubernetes, with its YAML errors. */
const files = yamlFiles(BASE).map((full) => {
  const documents = parseAllDocuments(readFileSync(full, "utf8"));
  return {
    file: relative(BASE, full),
    errors: documents.flatMap((d) => d.errors.map((e) => e.message)),
    objects: documents.map((d) => d.toJS() as Node),
  };
});
const isKustomization = (file: string) => /(^|\/)kustomization\.yaml$/.test(file);
const manifests = files
  .filter((f) => !isKustomization(f.file))
  .flatMap((f) => f.objects.map((manifest, i) => ({ name: `${f.file}#${i}`, file: f.file, manifest })));
const kustomization = node(files.find((f) => f.file === "kustomization.yaml")?.objects[0]);

const find = (kind: string, name?: string): Node => {
  const found = manifests.filter(
    ({ manifest }) => manifest.kind === kind && (name === undefined || node(manifest.metadata).name === name),
  );
  expect(found, `${kind} ${name ?? ""}`).toHaveLength(1);
  return found[0]?.manifest ?? {};
};

const deployment = find("Deployment");
const podSpec = node(node(node(deployment.spec).template).spec);
const podLabels = node(node(node(node(deployment.spec).template).metadata).labels);
const container = node(nodes(podSpec.containers)[0]);
const containerPorts = new Map(nodes(container.ports).map((p) => [String(p.name), Number(p.containerPort)]));
const env = nodes(container.env);
const envValue = (name: string) => env.find((e) => e.name === name)?.value as string | undefined;
const services = manifests.filter((m) => m.manifest.kind === "Service").map((m) => m.manifest);
const serviceNamed = (name: string) => find("Service", name);
const namespace = String(kustomization.namespace);
/** The value of an EnvoyFilter's first patch. */
const patchValue = (name: string): Node =>
  node(node(nodes(node(find("EnvoyFilter", name).spec).configPatches)[0]?.patch).value);
const matches = (selector: unknown, labels: Node) =>
  Object.entries(node(selector)).every(([key, value]) => labels[key] === value);

describe("deploy/kubernetes, as files", () => {
  it("parses every file, each document a manifest with an apiVersion, a kind and a name", () => {
    expect(files.length).toBeGreaterThanOrEqual(12);
    for (const { file, errors, objects } of files) {
      expect(errors, file).toEqual([]);
      for (const object of objects) {
        expect(typeof object.apiVersion, file).toBe("string");
        expect(typeof object.kind, file).toBe("string");
        if (!isKustomization(file)) expect(typeof node(object.metadata).name, file).toBe("string");
      }
    }
  });

  it("lists in the kustomization every manifest of the base, each existing, once; the examples apart", () => {
    const resources = (kustomization.resources as string[]) ?? [];
    expect(new Set(resources).size).toBe(resources.length);
    for (const resource of resources) expect(statSync(join(BASE, resource)).isFile(), resource).toBe(true);
    const baseFiles = files.map((f) => f.file).filter((f) => !f.includes("/") && !isKustomization(f));
    expect([...resources].sort()).toEqual(baseFiles.sort());
    expect(resources.some((r) => r.startsWith("examples"))).toBe(false);
    // The image the kustomization sets is the one the Deployment names.
    expect(nodes(kustomization.images).map((i) => i.name)).toEqual([container.image]);
    expect(find("Namespace").metadata).toMatchObject({ name: namespace });
  });
});

describe("deploy/kubernetes, against the Kubernetes API's schemas", () => {
  it("has a schema for every manifest, and every manifest passes it", async () => {
    for (const { name, manifest } of manifests) expect(schemaProblems(manifest), name).toEqual([]);
  });

  it("uses no field the API does not have, and no value of the wrong type", () => {
    expect(typeProblems(manifests)).toEqual([]);
  });

  it("fails a broken manifest: a wrong type, a missing field, an unknown field, an unknown kind", async () => {
    const broken = structuredClone(deployment);
    node(broken.spec).replicas = "two";
    expect(schemaProblems(broken).join()).toMatch(/replicas must be integer/);
    const withoutContainers = structuredClone(deployment);
    delete node(node(node(withoutContainers.spec).template).spec).containers;
    expect(schemaProblems(withoutContainers).join()).toMatch(/required property containers/);
    const misspelt = structuredClone(deployment);
    const context = node(
      node(nodes(node(node(node(misspelt.spec).template).spec).containers)[0]).securityContext,
    );
    context.readOnlyRootFileSystem = context.readOnlyRootFilesystem;
    delete context.readOnlyRootFilesystem;
    expect(typeProblems([{ name: "misspelt", manifest: misspelt }]).join()).toMatch(
      /misspelt: .*readOnlyRootFileSystem.* does not exist in type/,
    );
    // A custom resource's schema too (Istio's).
    const policy = structuredClone(find("AuthorizationPolicy"));
    node(policy.spec).action = "CUSTOMISED";
    expect(schemaProblems(policy).join()).toMatch(/action must be equal to one of the allowed values/);
    expect(schemaProblems({ apiVersion: "apps/v1", kind: "Deploymnet" })).toEqual([
      "no schema for apps/v1 Deploymnet",
    ]);
  });
});

describe("the Deployment", () => {
  it("runs as a non-root user on a read-only root filesystem, without capabilities, under RuntimeDefault seccomp", () => {
    const pod = node(podSpec.securityContext);
    expect(pod.runAsNonRoot).toBe(true);
    expect(Number(pod.runAsUser)).toBeGreaterThan(0);
    expect(node(pod.seccompProfile).type).toBe("RuntimeDefault");
    const own = node(container.securityContext);
    expect(own).toMatchObject({ readOnlyRootFilesystem: true, allowPrivilegeEscalation: false });
    expect(node(own.capabilities).drop).toEqual(["ALL"]);
    expect(node(own.capabilities).add).toBeUndefined();
    expect(podSpec.automountServiceAccountToken).toBe(false);
    // The image's own user: the Dockerfile's USER, uid 1000 in the node image.
    expect(read("Dockerfile")).toMatch(/^USER node$/m);
    expect(pod.runAsUser).toBe(1000);
  });

  it("requests CPU and memory and caps memory", () => {
    const resources = node(container.resources);
    expect(node(resources.requests).cpu).toBeDefined();
    expect(node(resources.requests).memory).toBeDefined();
    expect(node(resources.limits).memory).toBeDefined();
  });

  it("is alive on /health and ready on /ready, of a port tollgate serves them on", () => {
    const liveness = node(node(container.livenessProbe).httpGet);
    const readiness = node(node(container.readinessProbe).httpGet);
    expect(liveness.path).toBe("/health");
    expect(readiness.path).toBe("/ready");
    for (const probe of [liveness, readiness]) expect(["http", "admin"]).toContain(probe.port);
  });

  it("gives the drain its time: grace ≥ the preStop sleep + DRAIN_DELAY_MS + the forced exit of src/process/shutdown.ts", () => {
    const forcedExitMs = Number(
      /const FORCED_EXIT_MS = ([\d_]+);/.exec(read("src/process/shutdown.ts"))?.[1]?.replaceAll("_", ""),
    );
    expect(forcedExitMs).toBeGreaterThan(0);
    const drainDelayMs = loadConfig({ DRAIN_DELAY_MS: envValue("DRAIN_DELAY_MS") ?? "" }).drainDelayMs;
    const command = node(node(node(container.lifecycle).preStop).exec).command as string[];
    expect(command[0]).toBe("sleep");
    const preStopSeconds = Number(command[1]);
    expect(preStopSeconds).toBeGreaterThan(0);
    const needed = preStopSeconds + (drainDelayMs + forcedExitMs) / 1000;
    expect(Number(podSpec.terminationGracePeriodSeconds)).toBeGreaterThanOrEqual(needed);
    // And the docs say the same numbers.
    const doc = read("docs/kubernetes.md");
    expect(doc).toContain(`terminationGracePeriodSeconds: ${String(podSpec.terminationGracePeriodSeconds)}`);
    expect(doc).toContain(`${forcedExitMs / 1000} s`);
  });

  it("sets only tollgate settings, valid for production, with the ports its container declares", () => {
    const secretRefs = env.filter((e) => node(e.valueFrom).secretKeyRef !== undefined);
    const values: Record<string, string> = {};
    for (const entry of env) values[String(entry.name)] = String(entry.value ?? "");
    // Stand-ins for the Secret's values, of the kind production accepts.
    const secret = (name: string) => `${name}-${"k8s-test-stand-in-".repeat(3)}`;
    for (const entry of secretRefs) values[String(entry.name)] = secret(String(entry.name));
    values.REDIS_URL = "redis://redis.tollgate.svc:6379";
    const config = loadConfig(values);
    expect(config.unknownSettings).toEqual([]);
    expect(config.production).toBe(true);
    expect(config.port).toBe(containerPorts.get("http"));
    expect(config.checkPort).toBe(containerPorts.get("check"));
    expect(config.grpcPort).toBe(containerPorts.get("grpc"));
    expect(config.adminPort).toBe(containerPorts.get("admin"));
    expect(containerPorts.size).toBe(4);
    // Every secret key is one `kubectl create secret` in docs/kubernetes.md sets.
    const doc = read("docs/kubernetes.md");
    expect(secretRefs.map((e) => String(e.name)).sort()).toEqual([
      "ADMIN_TOKEN",
      "JWT_SECRET",
      "METRICS_TOKEN",
      "REDIS_URL",
    ]);
    for (const entry of secretRefs) {
      const ref = node(node(entry.valueFrom).secretKeyRef);
      expect(doc).toContain(`--from-literal=${String(ref.key)}=`);
      expect(doc).toContain(`kubectl -n ${namespace} create secret generic ${String(ref.name)}`);
    }
  });

  it("reads POLICY_FILE, RLS_CONFIG and USERS_FILE from mounted volumes, the ConfigMaps without subPath", () => {
    const mounts = nodes(container.volumeMounts);
    const volumes = nodes(podSpec.volumes);
    const volumeAt = (path: string) => {
      const mount = mounts.find((m) => path === m.mountPath || path.startsWith(`${String(m.mountPath)}/`));
      expect(mount, path).toBeDefined();
      expect(mount?.subPath, path).toBeUndefined();
      expect(mount?.readOnly, path).toBe(true);
      return { mount: node(mount), volume: node(volumes.find((v) => v.name === mount?.name)) };
    };
    const policy = volumeAt(String(envValue("POLICY_FILE")));
    const key = String(envValue("POLICY_FILE")).slice(String(policy.mount.mountPath).length + 1);
    expect(node(find("ConfigMap", String(node(policy.volume.configMap).name)).data)[key]).toBeDefined();
    const rls = volumeAt(String(envValue("RLS_CONFIG")));
    expect(rls.mount.mountPath).toBe(envValue("RLS_CONFIG"));
    expect(find("ConfigMap", String(node(rls.volume.configMap).name))).toBeDefined();
    const users = volumeAt(String(envValue("USERS_FILE")));
    expect(node(users.volume.secret).secretName).toBe("tollgate-users");
    expect(read("docs/kubernetes.md")).toContain(
      `create secret generic tollgate-users --from-file=users.json`,
    );
  });
});

describe("the ConfigMaps", () => {
  it("hold a policy tollgate loads", () => {
    const data = node(find("ConfigMap", "tollgate-policy").data);
    for (const [name, text] of Object.entries(data))
      expect(() => parsePolicy(String(text), name)).not.toThrow();
  });

  it("hold the built-in policy, as its comment says, by meaning (the version a reload reports)", () => {
    const text = String(node(find("ConfigMap", "tollgate-policy").data)["policy.yaml"]);
    expect(policyVersion(parsePolicy(text, "policy.yaml"))).toBe(
      policyVersion(parsePolicy(DEFAULT_POLICY_YAML, "built-in policy")),
    );
  });

  it("hold an RLS configuration tollgate loads, with a limit for every descriptor the EnvoyFilter builds", () => {
    const dir = mkdtempSync(join(tmpdir(), "tollgate-k8s-rls-"));
    for (const [name, text] of Object.entries(node(find("ConfigMap", "tollgate-rls").data)))
      writeFileSync(join(dir, name), String(text));
    const config = loadRlsConfig(dir, { defaultAlgorithm: "fixed-window" });
    const filter = patchValue("tollgate-ratelimit");
    const domain = String(node(filter.typed_config).domain);
    expect(config.domains.has(domain)).toBe(true);
    const actions = nodes(patchValue("tollgate-ratelimit-actions").rate_limits);
    expect(actions.length).toBeGreaterThanOrEqual(2);
    const descriptors = actions.map((limit) => ({
      entries: nodes(limit.actions).map((action) => {
        if (action.remote_address !== undefined) return { key: "remote_address", value: "198.51.100.7" };
        const match = node(action.header_value_match);
        return { key: String(match.descriptor_key), value: String(match.descriptor_value) };
      }),
    }));
    const limits = limitsFor(config, domain, descriptors);
    for (const [i, limit] of limits.entries()) expect(limit, JSON.stringify(descriptors[i])).toBeDefined();
  });
});

describe("the Services", () => {
  it("select the Deployment's pods and name container ports, one Service per listener", () => {
    expect(services.map((s) => node(s.metadata).name).sort()).toEqual([
      "tollgate",
      "tollgate-admin",
      "tollgate-check",
      "tollgate-grpc",
    ]);
    const targets = services.flatMap((s) => {
      expect(matches(node(s.spec).selector, podLabels), String(node(s.metadata).name)).toBe(true);
      return nodes(node(s.spec).ports).map((p) => {
        expect(containerPorts.get(String(p.targetPort)), String(p.targetPort)).toBe(p.port);
        return String(p.targetPort);
      });
    });
    expect(targets.sort()).toEqual([...containerPorts.keys()].sort());
  });

  it("declare the gRPC port as gRPC by name and appProtocol, so that proxies speak HTTP/2 to it", () => {
    const port = node(nodes(node(serviceNamed("tollgate-grpc").spec).ports)[0]);
    expect(port).toMatchObject({ name: "grpc", appProtocol: "grpc", targetPort: "grpc" });
  });
});

describe("the PodDisruptionBudget, the HorizontalPodAutoscaler, the NetworkPolicy and the ServiceMonitor", () => {
  it("keep a pod up through a drain, and scale the Deployment on CPU from at least two", () => {
    const pdb = node(find("PodDisruptionBudget").spec);
    expect(matches(node(pdb.selector).matchLabels, podLabels)).toBe(true);
    const hpa = node(find("HorizontalPodAutoscaler").spec);
    expect(find("HorizontalPodAutoscaler").apiVersion).toBe("autoscaling/v2");
    expect(hpa.scaleTargetRef).toEqual({
      apiVersion: "apps/v1",
      kind: "Deployment",
      name: node(deployment.metadata).name,
    });
    expect(Number(hpa.minReplicas)).toBeGreaterThanOrEqual(2);
    // The autoscaler owns the count: a replicas field would reset it at every apply.
    expect(node(deployment.spec).replicas).toBeUndefined();
    expect(Number(pdb.maxUnavailable)).toBeLessThan(Number(hpa.minReplicas));
    expect(nodes(hpa.metrics).map((m) => node(m.resource).name)).toContain("cpu");
  });

  it("let only the proxy's namespace reach the public, check and gRPC ports, and only monitoring the admin port", () => {
    const policy = node(find("NetworkPolicy").spec);
    expect(matches(node(policy.podSelector).matchLabels, podLabels)).toBe(true);
    expect(policy.policyTypes).toEqual(["Ingress"]);
    const rules = nodes(policy.ingress).map((rule) => ({
      from: nodes(rule.from).map((f) => ({ ...node(node(f.namespaceSelector).matchLabels) })),
      ports: nodes(rule.ports).map((p) => String(p.port)),
    }));
    // Every rule names its source namespaces (no open "from") and its ports (named container ports).
    for (const rule of rules) {
      expect(rule.from.length).toBeGreaterThan(0);
      for (const port of rule.ports) expect(containerPorts.has(port), port).toBe(true);
    }
    expect(rules).toEqual([
      { from: [{ "tollgate/proxy": "true" }], ports: ["http", "check", "grpc"] },
      { from: [{ "kubernetes.io/metadata.name": "monitoring" }], ports: ["admin"] },
    ]);
  });

  it("scrapes /metrics on the admin Service's port with METRICS_TOKEN", () => {
    const monitor = node(find("ServiceMonitor").spec);
    const admin = serviceNamed("tollgate-admin");
    expect(matches(node(monitor.selector).matchLabels, node(node(admin.metadata).labels))).toBe(true);
    for (const other of services.filter((s) => s !== admin))
      expect(matches(node(monitor.selector).matchLabels, node(node(other.metadata).labels))).toBe(false);
    const endpoint = node(nodes(monitor.endpoints)[0]);
    expect(endpoint.port).toBe(node(nodes(node(admin.spec).ports)[0]).name);
    expect(endpoint.path).toBe("/metrics");
    const credentials = node(node(endpoint.authorization).credentials);
    const metricsToken = node(node(env.find((e) => e.name === "METRICS_TOKEN")?.valueFrom).secretKeyRef);
    expect(credentials).toEqual({ name: metricsToken.name, key: metricsToken.key });
  });

  it("names the scrape job as the alerts select it, not after the Service (the operator's default)", () => {
    const monitor = node(find("ServiceMonitor").spec);
    const admin = serviceNamed("tollgate-admin");
    // The job the operator gives the targets: the value of the Service's jobLabel label, else its name.
    const labels = node(node(admin.metadata).labels);
    const job = String(labels[String(monitor.jobLabel)] ?? node(admin.metadata).name);
    const down = rules().find((r) => r.alert === "TollgateDown")?.expr ?? "";
    expect(down).toMatch(/job="[^"]+"/);
    expect(down).toContain(`job="${job}"`);
  });
});

describe("deploy/kubernetes/examples", () => {
  const grpcService = serviceNamed("tollgate-grpc");
  const grpcHost = `${String(node(grpcService.metadata).name)}.${namespace}.svc.cluster.local`;
  const grpcPort = Number(node(nodes(node(grpcService.spec).ports)[0]).port);

  it("declares tollgate's gRPC Service as Istio's envoyExtAuthzGrpc provider, as docs/istio.md does", () => {
    const operator = find("IstioOperator");
    const providers = nodes(node(node(operator.spec).meshConfig).extensionProviders);
    const provider = node(providers[0]);
    const grpc = node(provider.envoyExtAuthzGrpc);
    expect(grpc).toMatchObject({ service: grpcHost, port: grpcPort, failOpen: false });
    // The fields of Istio's MeshConfig.ExtensionProvider.EnvoyExternalAuthorizationGrpcProvider that docs/istio.md uses.
    expect(Object.keys(grpc).sort()).toEqual(["failOpen", "port", "service", "statusOnError", "timeout"]);
    const timeoutMs = Number(/^(\d*\.?\d+)s$/.exec(String(grpc.timeout))?.[1]) * 1000;
    expect(timeoutMs).toBeGreaterThan(loadConfig({}).redisTimeoutMs);
    // The entry of docs/istio.md, but for the Service's name.
    const doc = read("docs/istio.md");
    for (const line of [
      `port: ${grpcPort}`,
      `timeout: ${String(grpc.timeout)}`,
      `statusOnError: "${String(grpc.statusOnError)}"`,
    ])
      expect(doc).toContain(line);
    const policy = node(find("AuthorizationPolicy").spec);
    expect(policy.action).toBe("CUSTOM");
    expect(node(policy.provider).name).toBe(provider.name);
    expect(nodes(nodes(policy.rules)[0]?.to)[0]).toEqual({ operation: { notPaths: ["/health", "/ready"] } });
  });

  it("declares the HTTP check as Istio's envoyExtAuthzHttp provider with envoy/envoy.yaml's lists", () => {
    const block = /```yaml\n(meshConfig:\n(?:(?!```)[\s\S])*envoyExtAuthzHttp:(?:(?!```)[\s\S])*)```/.exec(
      read("docs/istio.md"),
    )?.[1];
    const provider = node(
      node(nodes(node(node(parseAllDocuments(block ?? "")[0]?.toJS()).meshConfig).extensionProviders)[0])
        .envoyExtAuthzHttp,
    );
    const check = serviceNamed("tollgate-check");
    expect(provider).toMatchObject({
      service: `${String(node(check.metadata).name)}.${namespace}.svc.cluster.local`,
      port: Number(node(nodes(node(check.spec).ports)[0]).port),
      failOpen: false,
      statusOnError: "503",
    });
    // envoy/envoy.yaml's ext_authz filter, whose settings Istio's fields become.
    const filter = node(
      parseAllDocuments(read("envoy/envoy.yaml"))[0]
        ?.toJS()
        .static_resources.listeners[0].filter_chains[0].filters[0].typed_config.http_filters.find(
          (f: Node) => f.name === "envoy.filters.http.ext_authz",
        ).typed_config,
    );
    const service = node(filter.http_service);
    // Istio writes "name*" as a prefix match and anything else as an exact one.
    const istio = (list: Node) =>
      nodes(list.patterns)
        .map((p) => (p.prefix === undefined ? String(p.exact) : `${String(p.prefix)}*`))
        .sort();
    const response = node(service.authorization_response);
    expect(provider.pathPrefix).toBe(service.path_prefix);
    expect([...nodes(provider.headersToUpstreamOnAllow)].sort()).toEqual(
      istio(node(response.allowed_upstream_headers)),
    );
    expect([...nodes(provider.headersToDownstreamOnDeny)].sort()).toEqual(
      istio(node(response.allowed_client_headers)),
    );
    expect([...nodes(provider.headersToDownstreamOnAllow)].sort()).toEqual(
      istio(node(response.allowed_client_headers_on_success)),
    );
    expect(provider.includeAdditionalHeadersInCheck).toEqual(
      Object.fromEntries(
        nodes(node(service.authorization_request).headers_to_add).map((h) => [h.key, h.value]),
      ),
    );
    const allowed = istio(node(filter.allowed_headers));
    for (const name of nodes(provider.includeRequestHeadersInCheck)) expect(allowed).toContain(name);
  });

  it("points Envoy's rate limit filter at tollgate's gRPC Service through Istio's cluster for it", () => {
    const filter = patchValue("tollgate-ratelimit");
    expect(filter.name).toBe("envoy.filters.http.ratelimit");
    const config = node(filter.typed_config);
    expect(config["@type"]).toBe("type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit");
    const service = node(config.rate_limit_service);
    expect(service.transport_api_version).toBe("V3");
    expect(node(node(service.grpc_service).envoy_grpc)).toEqual({
      cluster_name: `outbound|${grpcPort}||${grpcHost}`,
      authority: grpcHost,
    });
    expect(config.failure_mode_deny).toBe(false);
    // The filter's settings are envoy/envoy-ratelimit.yaml's.
    const edge = read("envoy/envoy-ratelimit.yaml");
    for (const key of ["domain", "timeout", "request_type", "stat_prefix"])
      expect(edge).toContain(`${key}: ${String(config[key])}`);
  });
});
