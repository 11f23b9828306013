// The tests' gRPC client: @grpc/grpc-js with @grpc/proto-loader, a different gRPC implementation
// from tollgate's own server (its own HTTP/2, src/frontends/envoy-grpc/h2/), over the
// same .proto files.
import { fileURLToPath } from "node:url";
import * as grpc from "@grpc/grpc-js";
import * as loader from "@grpc/proto-loader";

const PROTO_DIR = fileURLToPath(new URL("../../src/frontends/envoy-grpc/proto/", import.meta.url));

const definition = loader.loadSync(
  ["envoy/service/auth/v3/external_auth.proto", "grpc/health/v1/health.proto"],
  {
    includeDirs: [PROTO_DIR],
    keepCase: true,
    // Absent fields stay absent, so that a test sees what the server sent and nothing else.
    defaults: false,
    enums: Number,
  },
);
// biome-ignore lint/suspicious/noExplicitAny: grpc-js's loaded package is untyped by nature.
const loaded = grpc.loadPackageDefinition(definition) as any;

export type HeaderOption = {
  header: { key: string; value: string };
  append?: { value?: boolean };
  /** envoy.config.core.v3.HeaderValueOption.HeaderAppendAction, as a number. */
  append_action?: number;
};

/** google.protobuf.Value as proto-loader gives it (keepCase, no defaults). */
export type StructValue = {
  nullValue?: number;
  numberValue?: number;
  stringValue?: string;
  boolValue?: boolean;
  structValue?: { fields?: Record<string, StructValue> };
  listValue?: { values?: StructValue[] };
};

export type CheckResponse = {
  status?: { code?: number; message?: string };
  ok_response?: {
    headers?: HeaderOption[];
    headers_to_remove?: string[];
    response_headers_to_add?: HeaderOption[];
  };
  denied_response?: { status?: { code?: number }; headers?: HeaderOption[]; body?: string };
  dynamic_metadata?: { fields?: Record<string, StructValue> };
};

export type CheckRequestInput = {
  method?: string;
  path: string;
  headers?: Record<string, string>;
  /** The downstream client's address as Envoy states it in attributes.source. */
  source?: string;
};

export function checkRequest(input: CheckRequestInput) {
  return {
    attributes: {
      ...(input.source === undefined
        ? {}
        : { source: { address: { socket_address: { address: input.source, port_value: 40000 } } } }),
      request: {
        http: {
          method: input.method ?? "GET",
          path: input.path,
          headers: input.headers ?? {},
          protocol: "HTTP/1.1",
        },
      },
    },
  };
}

/** The headers of an option list as a plain record (last one wins), for assertions. */
export const headerRecord = (options: HeaderOption[] | undefined): Record<string, string> =>
  Object.fromEntries((options ?? []).map((option) => [option.header.key, option.header.value]));

export type GrpcClients = {
  check(input: CheckRequestInput | object): Promise<CheckResponse>;
  /** A Check call that is expected to fail: its gRPC status code and details. */
  checkError(input: object): Promise<{ code: number; details: string }>;
  health(service?: string): Promise<{ status?: number } | { code: number }>;
  /** Health Watch: every status received, and the stream's end. */
  watch(service?: string): { statuses: number[]; ended: Promise<{ code: number }>; cancel(): void };
  close(): void;
};

/** A unary Check call as grpc-js makes it. */
export type AuthorizationClient = {
  Check(
    request: object,
    options: grpc.CallOptions,
    callback: (error: grpc.ServiceError | null, response?: CheckResponse) => void,
  ): grpc.ClientUnaryCall;
  close(): void;
};

/**
 * An Authorization client for the gRPC server at `url` (http://host:port), plaintext HTTP/2 as Envoy's
 * envoy_grpc reaches an h2c cluster; `authority` replaces the :authority grpc-js would send (Envoy
 * sends the cluster's name).
 */
export function authorizationClient(url: string, authority?: string): AuthorizationClient {
  const options = authority === undefined ? {} : { "grpc.default_authority": authority };
  return new loaded.envoy.service.auth.v3.Authorization(
    new URL(url).host,
    grpc.credentials.createInsecure(),
    options,
  );
}

/** The Authorization service's definition, for a scripted grpc-js server. */
export const authorizationServiceDefinition = (): grpc.ServiceDefinition =>
  loaded.envoy.service.auth.v3.Authorization.service;

/** Clients of a tollgate gRPC listener at `url` (http://host:port); TLS when `rootCert` is given. */
export function grpcClients(url: string, options: { rootCert?: Buffer } = {}): GrpcClients {
  const target = new URL(url).host;
  const credentials =
    options.rootCert === undefined
      ? grpc.credentials.createInsecure()
      : grpc.credentials.createSsl(options.rootCert);
  const auth = new loaded.envoy.service.auth.v3.Authorization(target, credentials);
  const health = new loaded.grpc.health.v1.Health(target, credentials);
  const call = <T>(client: typeof auth, method: string, request: object) =>
    new Promise<T>((resolve, reject) => {
      client[method](request, { deadline: Date.now() + 15_000 }, (error: grpc.ServiceError | null, out: T) =>
        error === null ? resolve(out) : reject(error),
      );
    });
  return {
    check: (input) =>
      call<CheckResponse>(auth, "Check", "path" in input ? checkRequest(input as CheckRequestInput) : input),
    checkError: (input) =>
      call<CheckResponse>(auth, "Check", input).then(
        (out) => {
          throw new Error(`expected a failed call, got ${JSON.stringify(out)}`);
        },
        (error: grpc.ServiceError) => ({ code: error.code, details: error.details }),
      ),
    health: (service = "") =>
      call<{ status?: number }>(health, "Check", { service }).catch((error: grpc.ServiceError) => ({
        code: error.code,
      })),
    watch(service = "") {
      const statuses: number[] = [];
      const stream = health.Watch({ service });
      stream.on("data", (message: { status?: number }) => statuses.push(message.status ?? 0));
      const ended = new Promise<{ code: number }>((resolve) => {
        stream.on("status", (status: grpc.StatusObject) => resolve({ code: status.code }));
        stream.on("error", () => undefined);
      });
      return { statuses, ended, cancel: () => stream.cancel() };
    },
    close() {
      auth.close();
      health.close();
    },
  };
}

// Envoy's rate limit service (envoy.service.ratelimit.v3.RateLimitService), loaded apart so that
// 64-bit fields (Duration.seconds, a descriptor's hits_addend) come as plain numbers.
const rlsDefinition = loader.loadSync(["envoy/service/ratelimit/v3/rls.proto"], {
  includeDirs: [PROTO_DIR],
  keepCase: true,
  defaults: false,
  enums: Number,
  longs: Number,
});
// biome-ignore lint/suspicious/noExplicitAny: grpc-js's loaded package is untyped by nature.
const rlsLoaded = grpc.loadPackageDefinition(rlsDefinition) as any;

/** RateLimitResponse as proto-loader gives it (keepCase, no defaults: a 0 or an absent field is absent). */
export type RlsDescriptorStatus = {
  code?: number;
  current_limit?: { name?: string; requests_per_unit?: number; unit?: number };
  limit_remaining?: number;
  duration_until_reset?: { seconds?: number; nanos?: number };
};
export type RateLimitResponse = {
  overall_code?: number;
  statuses?: RlsDescriptorStatus[];
  response_headers_to_add?: { key: string; value: string }[];
};

/** One descriptor of a RateLimitRequest: its entries as pairs, and optionally its own limit and addend. */
export type RlsDescriptorInput = {
  entries: readonly (readonly [string, string])[];
  limit?: { requests_per_unit: number; unit: number };
  hits_addend?: number;
};

export function rateLimitRequest(
  domain: string,
  descriptors: readonly RlsDescriptorInput[],
  hitsAddend?: number,
) {
  return {
    domain,
    descriptors: descriptors.map((d) => ({
      entries: d.entries.map(([key, value]) => ({ key, value })),
      ...(d.limit === undefined ? {} : { limit: d.limit }),
      ...(d.hits_addend === undefined ? {} : { hits_addend: { value: d.hits_addend } }),
    })),
    ...(hitsAddend === undefined ? {} : { hits_addend: hitsAddend }),
  };
}

export type RlsClient = {
  /** A ShouldRateLimit call (a raw RateLimitRequest object); rejects with grpc-js's ServiceError. */
  call(request: object, deadlineMs?: number): Promise<RateLimitResponse>;
  /** ShouldRateLimit for `domain` and descriptors given as lists of [key, value]. */
  shouldRateLimit(
    domain: string,
    descriptors: readonly RlsDescriptorInput[],
    hitsAddend?: number,
  ): Promise<RateLimitResponse>;
  /** A call that is expected to fail: its gRPC status code and details, and how long it took (ms). */
  callError(request: object, deadlineMs?: number): Promise<{ code: number; details: string; ms: number }>;
  close(): void;
};

/** A RateLimitService client of the gRPC listener at `url` (http://host:port), plaintext HTTP/2. */
export function rlsClient(url: string): RlsClient {
  const client = new rlsLoaded.envoy.service.ratelimit.v3.RateLimitService(
    new URL(url).host,
    grpc.credentials.createInsecure(),
  );
  const call = (request: object, deadlineMs = 15_000) =>
    new Promise<RateLimitResponse>((resolve, reject) => {
      client.ShouldRateLimit(
        request,
        { deadline: Date.now() + deadlineMs },
        (error: grpc.ServiceError | null, out: RateLimitResponse) =>
          error === null ? resolve(out) : reject(error),
      );
    });
  return {
    call,
    shouldRateLimit: (domain, descriptors, hitsAddend) =>
      call(rateLimitRequest(domain, descriptors, hitsAddend)),
    async callError(request, deadlineMs) {
      const started = performance.now();
      try {
        const out = await call(request, deadlineMs);
        throw new Error(`expected a failed call, got ${JSON.stringify(out)}`);
      } catch (error) {
        const e = error as grpc.ServiceError;
        if (typeof e.code !== "number") throw error;
        return { code: e.code, details: e.details, ms: performance.now() - started };
      }
    },
    close: () => client.close(),
  };
}
