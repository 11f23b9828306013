// OpenTelemetry's variables as tollgate reads them: tracing off without an endpoint, the
// specification's defaults, and a clear problem (never a header's value) for each bad one.
import { describe, expect, it } from "vitest";
import { ConfigError, loadConfig } from "../../src/config/env.js";

const tracing = (env: Record<string, string>) => loadConfig(env).tracing;

function problems(env: Record<string, string>): string[] {
  try {
    loadConfig(env);
  } catch (error) {
    if (error instanceof ConfigError) return error.problems;
    throw error;
  }
  return [];
}

const ENDPOINT = { OTEL_EXPORTER_OTLP_ENDPOINT: "http://collector:4318" };

describe("tracing settings", () => {
  it("leave tracing off without an endpoint, whatever else is set, and with OTEL_SDK_DISABLED=true", () => {
    expect(tracing({})).toBeUndefined();
    expect(tracing({ OTEL_TRACES_SAMPLER: "always_on", OTEL_SERVICE_NAME: "x" })).toBeUndefined();
    expect(tracing({ ...ENDPOINT, OTEL_SDK_DISABLED: "true" })).toBeUndefined();
    expect(tracing({ ...ENDPOINT, OTEL_SDK_DISABLED: "false" })).toBeDefined();
  });

  it("follow the specification's defaults: /v1/traces appended, http/protobuf, parentbased_always_on", () => {
    expect(tracing({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://collector:4318/" })).toEqual({
      url: "http://collector:4318/v1/traces",
      protocol: "http/protobuf",
      headers: {},
      sampler: "parentbased_always_on",
      ratio: 1,
      serviceName: "tollgate",
      resourceAttributes: {},
    });
  });

  it("take the traces endpoint as given, the traces protocol and headers over the general ones", () => {
    expect(
      tracing({
        ...ENDPOINT,
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: "https://traces.example.com/in",
        OTEL_EXPORTER_OTLP_PROTOCOL: "http/protobuf",
        OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: "http/json",
        OTEL_EXPORTER_OTLP_HEADERS: "x-api-key=general,x-team=edge",
        OTEL_EXPORTER_OTLP_TRACES_HEADERS: "x-api-key=tr%2Caces",
        OTEL_TRACES_SAMPLER: "parentbased_traceidratio",
        OTEL_TRACES_SAMPLER_ARG: "0.25",
        OTEL_RESOURCE_ATTRIBUTES: "service.name=from-attributes,deployment.environment.name=prod",
      }),
    ).toEqual({
      url: "https://traces.example.com/in",
      protocol: "http/json",
      headers: { "x-api-key": "tr,aces", "x-team": "edge" },
      sampler: "parentbased_traceidratio",
      ratio: 0.25,
      serviceName: "from-attributes",
      resourceAttributes: { "service.name": "from-attributes", "deployment.environment.name": "prod" },
    });
    expect(tracing({ ...ENDPOINT, OTEL_SERVICE_NAME: "edge-authz" })?.serviceName).toBe("edge-authz");
  });

  it("refuse what they cannot honour, each with a problem naming its variable", () => {
    expect(
      problems({
        OTEL_EXPORTER_OTLP_ENDPOINT: "collector:4318",
        OTEL_SDK_DISABLED: "yes",
      }),
    ).toEqual([
      'OTEL_SDK_DISABLED: expected true or false, got "yes"',
      "OTEL_EXPORTER_OTLP_ENDPOINT: expected an http:// or https:// URL such as http://otel-collector:4318",
    ]);
    const found = problems({
      ...ENDPOINT,
      OTEL_EXPORTER_OTLP_PROTOCOL: "grpc",
      OTEL_TRACES_SAMPLER: "jaeger_remote",
      OTEL_TRACES_SAMPLER_ARG: "1.5",
    });
    expect(found).toHaveLength(2);
    expect(found[0]).toMatch(/^OTEL_TRACES_SAMPLER: expected one of always_on, .*got "jaeger_remote"$/);
    expect(found[1]).toMatch(
      /^OTEL_EXPORTER_OTLP_PROTOCOL: expected http\/protobuf or http\/json, got "grpc" \(OTLP over gRPC/,
    );
    expect(
      problems({ ...ENDPOINT, OTEL_TRACES_SAMPLER: "traceidratio", OTEL_TRACES_SAMPLER_ARG: "1.5" }),
    ).toEqual(['OTEL_TRACES_SAMPLER_ARG: expected a ratio from 0 to 1 such as 0.1, got "1.5"']);
  });

  it("never echo a header's value in a problem: it may be an API key", () => {
    const found = problems({
      ...ENDPOINT,
      OTEL_EXPORTER_OTLP_HEADERS: "authorization=Bearer ok,sk-secret-key-123",
    });
    expect(found).toEqual([
      "OTEL_EXPORTER_OTLP_HEADERS: entry 2 is not key=value (percent-encode , and = inside values)",
    ]);
    expect(found.join("\n")).not.toContain("sk-secret");
  });
});
