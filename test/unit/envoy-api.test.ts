// envoy/'s configs (as shipped and as render.mjs writes them), the Istio EnvoyFilter example and the
// gRPC listener's proto copies, each held to Envoy's own v3 API files (test/support/envoy-api.ts).
import { readFileSync } from "node:fs";
import protobuf from "protobufjs";
import { describe, expect, it } from "vitest";
import { parse, parseAllDocuments } from "yaml";
import { type Address, CONFIGS, type ConfigName, renderEnvoyConfig } from "../../envoy/render.mjs";
import { envoyApiRoot, envoyConfigProblems } from "../support/envoy-api.js";

type Node = Record<string, unknown>;
const ROOT = new URL("../../", import.meta.url);
const read = (path: string) => readFileSync(new URL(path, ROOT), "utf8");
const BOOTSTRAP = "envoy.config.bootstrap.v3.Bootstrap";
const names = Object.keys(CONFIGS) as ConfigName[];

describe("envoy/'s configurations, against Envoy's v3 API", () => {
  it.each(names)(
    "%s: every field of the file is one of the API, of its type, nothing required left out",
    (name) => {
      expect(envoyConfigProblems(BOOTSTRAP, parse(read(`envoy/${CONFIGS[name].file}`)))).toEqual([]);
    },
  );

  it.each(names)(
    "%s: so is render.mjs's for a bare machine, an IPv6 address and another API key header",
    (name) => {
      const v4 = (port: number): Address => ({ host: "127.0.0.1", port, ipv6: false });
      const addresses = {
        check: v4(19191),
        grpc: { host: "::1", port: 18081, ipv6: true },
        public: { host: "tollgate.internal", port: 18080, ipv6: false },
        upstream: v4(8000),
        listen: v4(10080),
        admin: v4(9901),
      };
      const rendered = parse(renderEnvoyConfig(name, addresses, "X-Client-Key"));
      expect(envoyConfigProblems(BOOTSTRAP, rendered)).toEqual([]);
    },
  );

  it("refuses what Envoy refuses: a misspelt field, a wrong type, a unit in a duration, an unknown enum value or @type, a oneof set twice, a value out of bounds, a required field left out", () => {
    const file = read("envoy/envoy.yaml");
    const broken = (from: string, to: string) => {
      expect(file.split(from), from).toHaveLength(2);
      return envoyConfigProblems(BOOTSTRAP, parse(file.replace(from, to)));
    };
    expect(broken("path_prefix: /ext_authz", "path_prefx: /ext_authz")).toEqual([
      expect.stringMatching(/\.http_service\.path_prefx: no such field in .*ext_authz\.v3\.HttpService$/),
    ]);
    expect(broken("failure_mode_allow: false", 'failure_mode_allow: "false"')).toEqual([
      expect.stringMatching(/\.failure_mode_allow: a bool expected/),
    ]);
    expect(broken("connect_timeout: 0.25s", "connect_timeout: 250ms")).toEqual([
      expect.stringMatching(/\.clusters\[0\]\.connect_timeout: a duration such as "0\.25s" expected/),
    ]);
    expect(broken("status_on_error: { code: ServiceUnavailable }", "status_on_error: { code: 503 }")).toEqual(
      [],
    ); // an enum by number is proto3 JSON too
    expect(
      broken("status_on_error: { code: ServiceUnavailable }", "status_on_error: { code: Unavailable }"),
    ).toEqual([
      expect.stringMatching(
        /\.status_on_error\.code: "Unavailable" is no value of envoy\.type\.v3\.StatusCode$/,
      ),
    ]);
    expect(broken("ext_authz.v3.ExtAuthz\n", "ext_authz.v3.ExtAuth\n")).toEqual([
      expect.stringMatching(/"@type" ".*ext_authz\.v3\.ExtAuth" names no message of the API$/),
    ]);
    expect(broken("- exact: x-request-id", "- { exact: x-request-id, prefix: x-request- }")).toEqual([
      expect.stringMatching(
        /\.allowed_headers\.patterns\[3\]\.prefix: oneof match_pattern is already set by exact$/,
      ),
    ]);
    // Envoy's validation rules (PGV) on values.
    expect(broken("port_value: 8000 }", "port_value: 80000 }")).toEqual([
      ".static_resources.clusters[2].load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address.port_value: must be <= 65535",
    ]);
    expect(broken("connect_timeout: 0.25s", "connect_timeout: 0s")).toEqual([
      ".static_resources.clusters[0].connect_timeout: must be > 0s",
    ]);
    expect(broken("response_flag_filter: { flags: [NR] }", "response_flag_filter: { flags: [NX] }")).toEqual([
      expect.stringMatching(/\.response_flag_filter\.flags\[0\]: "NX" is not one of LH, UH, /),
    ]);
    expect(broken("- name: upstream\n      type: STRICT_DNS", "- type: STRICT_DNS")).toEqual([
      ".static_resources.clusters[2]: name is required in envoy.config.cluster.v3.Cluster",
    ]);
  });
});

describe("deploy/kubernetes/examples/envoy-ratelimit-envoyfilter.yaml, against Envoy's v3 API", () => {
  const patches = parseAllDocuments(read("deploy/kubernetes/examples/envoy-ratelimit-envoyfilter.yaml"))
    .map((d) => d.toJS() as Node)
    .flatMap((d) => (d.spec as { configPatches: Node[] }).configPatches);
  /** The message each applyTo patches. */
  const PATCHED: Record<string, string> = {
    HTTP_FILTER: "envoy.extensions.filters.network.http_connection_manager.v3.HttpFilter",
    VIRTUAL_HOST: "envoy.config.route.v3.VirtualHost",
  };

  it("patches in only fields of the messages it patches, of their types", () => {
    expect(patches.map((p) => p.applyTo)).toEqual(["HTTP_FILTER", "VIRTUAL_HOST"]);
    for (const p of patches) {
      const patch = p.patch as Node;
      const problems = envoyConfigProblems(PATCHED[String(p.applyTo)] ?? "", patch.value, {
        partial: patch.operation === "MERGE",
      });
      expect(problems, String(p.applyTo)).toEqual([]);
    }
  });
});

/**
 * Where tollgate's proto copies (src/frontends/envoy-grpc/proto/README.md) knowingly differ from the
 * API files of @grpc/grpc-js-xds, which are older than Envoy 1.38: fields and values later Envoys
 * added, and the unit enum declared in the package that uses it (same values, same wire format).
 */
const KNOWN_DIFFERENCES = [
  "enum envoy.service.ratelimit.v3.RateLimitResponse.RateLimit.Unit: WEEK = 7 is not Envoy's (undefined)",
  "no enum envoy.extensions.common.ratelimit.v3.RateLimitUnit",
  "no field envoy.extensions.common.ratelimit.v3.RateLimitDescriptor.hits_addend",
  "no field envoy.extensions.common.ratelimit.v3.RateLimitDescriptor.is_negative_hits",
  "envoy.extensions.common.ratelimit.v3.RateLimitDescriptor.RateLimitOverride.unit: type envoy.extensions.common.ratelimit.v3.RateLimitUnit, Envoy's envoy.type.v3.RateLimitUnit",
];

describe("src/frontends/envoy-grpc/proto, against Envoy's v3 API", () => {
  it("gives every message field Envoy's number, type, label and oneof, and every enum value Envoy's number", () => {
    const files = ["envoy/service/auth/v3/external_auth.proto", "envoy/service/ratelimit/v3/rls.proto"];
    const ours = new protobuf.Root();
    const dir = new URL("src/frontends/envoy-grpc/proto/", ROOT).pathname;
    const wellKnown = (target: string) =>
      target.startsWith("google/protobuf/") ? target : `${dir}${target}`;
    ours.resolvePath = (_origin, target) => wellKnown(target);
    ours.loadSync(files, { keepCase: true }).resolveAll();
    const envoy = envoyApiRoot(files);
    const typeOf = (f: protobuf.Field) => (f.resolvedType ? f.resolvedType.fullName.slice(1) : f.type);
    const differences: string[] = [];
    let compared = 0;
    const walk = (ns: protobuf.NamespaceBase) => {
      for (const item of ns.nestedArray) {
        const name = item.fullName.slice(1);
        if (item instanceof protobuf.Type) {
          const theirs = envoy.lookup(name);
          if (!(theirs instanceof protobuf.Type)) differences.push(`no message ${name}`);
          else
            for (const f of item.fieldsArray) {
              compared++;
              const g = theirs.fields[f.name];
              if (g === undefined) differences.push(`no field ${name}.${f.name}`);
              else if (typeOf(f) !== typeOf(g))
                differences.push(`${name}.${f.name}: type ${typeOf(f)}, Envoy's ${typeOf(g)}`);
              else if (f.id !== g.id || f.repeated !== g.repeated || f.partOf?.name !== g.partOf?.name)
                differences.push(`${name}.${f.name}: number, label or oneof differ from Envoy's`);
            }
        } else if (item instanceof protobuf.Enum) {
          const theirs = envoy.lookup(name);
          if (!(theirs instanceof protobuf.Enum)) differences.push(`no enum ${name}`);
          else
            for (const [key, id] of Object.entries(item.values)) {
              compared++;
              if (theirs.values[key] !== id)
                differences.push(`enum ${name}: ${key} = ${id} is not Envoy's (${theirs.values[key]})`);
            }
        }
        if (item instanceof protobuf.Namespace) walk(item);
      }
    };
    walk(ours);
    expect(compared).toBeGreaterThan(100);
    expect(differences.sort()).toEqual([...KNOWN_DIFFERENCES].sort());
  });
});
