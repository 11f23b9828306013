// OpenTelemetry's variables as tollgate honours them: where spans go (OTLP over HTTP), which are
// sampled, and how the service is named. Tracing is off unless an endpoint is set.

/** The variables this file reads: env.ts's list of every setting includes them. */
export const TRACING_SETTINGS = [
  "OTEL_SDK_DISABLED",
  "OTEL_EXPORTER_OTLP_ENDPOINT",
  "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
  "OTEL_EXPORTER_OTLP_PROTOCOL",
  "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
  "OTEL_EXPORTER_OTLP_HEADERS",
  "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
  "OTEL_TRACES_SAMPLER",
  "OTEL_TRACES_SAMPLER_ARG",
  "OTEL_SERVICE_NAME",
  "OTEL_RESOURCE_ATTRIBUTES",
] as const;

type Read = (name: (typeof TRACING_SETTINGS)[number]) => string | undefined;

/** The samplers of the OpenTelemetry specification's OTEL_TRACES_SAMPLER, by their names there. */
export const SAMPLERS = [
  "always_on",
  "always_off",
  "traceidratio",
  "parentbased_always_on",
  "parentbased_always_off",
  "parentbased_traceidratio",
] as const;
export type SamplerName = (typeof SAMPLERS)[number];

export const PROTOCOLS = ["http/protobuf", "http/json"] as const;
export type OtlpProtocol = (typeof PROTOCOLS)[number];

export type TracingSettings = {
  /** The full URL spans are POSTed to (…/v1/traces). */
  url: string;
  protocol: OtlpProtocol;
  /** Sent with every export (a backend's API key, often): never logged. */
  headers: Record<string, string>;
  sampler: SamplerName;
  /** The ratio of the traceidratio samplers (OTEL_TRACES_SAMPLER_ARG), from 0 to 1. */
  ratio: number;
  serviceName: string;
  resourceAttributes: Record<string, string>;
};

/** The specification's default: follow the caller's decision, sample every trace that starts here. */
const DEFAULT_SAMPLER: SamplerName = "parentbased_always_on";

/** `key=value,key=value`, each part percent-encoded (the W3C Baggage form the specification uses). */
function keyValues(
  name: string,
  value: string | undefined,
  problems: string[],
  secret: boolean,
): Record<string, string> {
  const out: Record<string, string> = {};
  if (value === undefined) return out;
  for (const [i, item] of value.split(",").entries()) {
    if (item.trim() === "") continue;
    const at = item.indexOf("=");
    let decoded: [string, string] | undefined;
    try {
      if (at > 0)
        decoded = [
          decodeURIComponent(item.slice(0, at).trim()),
          decodeURIComponent(item.slice(at + 1).trim()),
        ];
    } catch {
      decoded = undefined;
    }
    if (decoded === undefined || decoded[0] === "") {
      // A header's value may be a backend's API key: the entry is named by its position only.
      problems.push(
        `${name}: entry ${i + 1} is not key=value${secret ? "" : ` ("${item.trim().slice(0, 60)}")`} (percent-encode , and = inside values)`,
      );
      continue;
    }
    out[decoded[0]] = decoded[1];
  }
  return out;
}

/** OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as it is, or OTEL_EXPORTER_OTLP_ENDPOINT with v1/traces appended. */
function tracesUrl(read: Read, problems: string[]): string | undefined {
  const own = read("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
  const base = read("OTEL_EXPORTER_OTLP_ENDPOINT");
  const [name, url] =
    own !== undefined
      ? (["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", own] as const)
      : base === undefined
        ? [undefined, undefined]
        : (["OTEL_EXPORTER_OTLP_ENDPOINT", `${base.replace(/\/+$/, "")}/v1/traces`] as const);
  if (name === undefined) return undefined;
  let parsed: URL | undefined;
  try {
    parsed = new URL(url);
  } catch {
    parsed = undefined;
  }
  if (parsed === undefined || (parsed.protocol !== "http:" && parsed.protocol !== "https:")) {
    problems.push(`${name}: expected an http:// or https:// URL such as http://otel-collector:4318`);
    return undefined;
  }
  return parsed.href;
}

function protocolOf(read: Read, problems: string[]): OtlpProtocol {
  const name =
    read("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") === undefined
      ? "OTEL_EXPORTER_OTLP_PROTOCOL"
      : "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL";
  const value = read(name);
  if (value === undefined) return "http/protobuf";
  const found = PROTOCOLS.find((p) => p === value.toLowerCase());
  if (found === undefined) {
    problems.push(
      `${name}: expected ${PROTOCOLS.join(" or ")}, got "${value}"${value.toLowerCase() === "grpc" ? " (OTLP over gRPC is not supported: use port 4318's http/protobuf)" : ""}`,
    );
    return "http/protobuf";
  }
  return found;
}

/** OTEL_TRACES_SAMPLER_ARG: the ratio, for the two samplers that take one (1 when unset). */
function ratioOf(read: Read, sampler: SamplerName, problems: string[]): number {
  const value = read("OTEL_TRACES_SAMPLER_ARG");
  if (value === undefined || !sampler.endsWith("traceidratio")) return 1;
  const ratio = Number(value);
  if (!/^\d*\.?\d+(e-?\d+)?$/i.test(value) || !(ratio >= 0 && ratio <= 1)) {
    problems.push(`OTEL_TRACES_SAMPLER_ARG: expected a ratio from 0 to 1 such as 0.1, got "${value}"`);
    return 1;
  }
  return ratio;
}

/** The tracing settings, or undefined when tracing is off (no endpoint, or OTEL_SDK_DISABLED=true). */
export function parseTracingSettings(read: Read, problems: string[]): TracingSettings | undefined {
  const disabled = read("OTEL_SDK_DISABLED");
  if (disabled !== undefined && !["true", "false"].includes(disabled.toLowerCase())) {
    problems.push(`OTEL_SDK_DISABLED: expected true or false, got "${disabled}"`);
  }
  const url = tracesUrl(read, problems);
  if (url === undefined || disabled?.toLowerCase() === "true") return undefined;
  const samplerValue = read("OTEL_TRACES_SAMPLER");
  let sampler = DEFAULT_SAMPLER;
  if (samplerValue !== undefined) {
    const found = SAMPLERS.find((s) => s === samplerValue.toLowerCase());
    if (found === undefined) {
      problems.push(`OTEL_TRACES_SAMPLER: expected one of ${SAMPLERS.join(", ")}, got "${samplerValue}"`);
    } else {
      sampler = found;
    }
  }
  const resourceAttributes = keyValues(
    "OTEL_RESOURCE_ATTRIBUTES",
    read("OTEL_RESOURCE_ATTRIBUTES"),
    problems,
    false,
  );
  return {
    url,
    protocol: protocolOf(read, problems),
    headers: {
      ...keyValues("OTEL_EXPORTER_OTLP_HEADERS", read("OTEL_EXPORTER_OTLP_HEADERS"), problems, true),
      ...keyValues(
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
        read("OTEL_EXPORTER_OTLP_TRACES_HEADERS"),
        problems,
        true,
      ),
    },
    sampler,
    ratio: ratioOf(read, sampler, problems),
    serviceName: read("OTEL_SERVICE_NAME") ?? resourceAttributes["service.name"] ?? "tollgate",
    resourceAttributes,
  };
}
