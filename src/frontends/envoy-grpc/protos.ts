// The message types of the gRPC listener, from the .proto files in proto/ (see proto/README.md),
// compiled once at start-up by protobufjs into its generated encoders and decoders: the health
// service and the rate limit service use them; the Check path reads and writes its two messages
// with check-request.ts and check-response.ts, which the tests hold to these.
import { readFileSync } from "node:fs";
import protobuf from "protobufjs";

/** Next to this module, in the sources and in dist/ (scripts/copy-assets.mjs, scripts/bundle.mjs). */
const PROTO_DIR = new URL("./proto/", import.meta.url);

/** Every file, each after the files it imports. */
const FILES = [
  "google/rpc/status.proto",
  "envoy/type/v3/http_status.proto",
  "envoy/config/core/v3/base.proto",
  "envoy/config/core/v3/address.proto",
  "envoy/service/auth/v3/attribute_context.proto",
  "envoy/service/auth/v3/external_auth.proto",
  "envoy/extensions/common/ratelimit/v3/ratelimit.proto",
  "envoy/service/ratelimit/v3/rls.proto",
  "grpc/health/v1/health.proto",
];

/** protobuf's well-known types, which protobufjs carries itself (their fields are camelCase). */
const WELL_KNOWN = [
  "google/protobuf/wrappers.proto",
  "google/protobuf/struct.proto",
  "google/protobuf/duration.proto",
];

function loadRoot(): protobuf.Root {
  const root = new protobuf.Root();
  for (const name of WELL_KNOWN) {
    const descriptor = protobuf.common.get(name);
    if (descriptor === null) throw new Error(`protobufjs lacks ${name}`);
    root.addJSON(descriptor.nested as protobuf.INamespace["nested"] & object);
  }
  // Files are read here rather than by protobufjs's loader, so that the bundle never needs the
  // loader's own way of reaching the file system.
  for (const file of FILES) {
    protobuf.parse(readFileSync(new URL(file, PROTO_DIR), "utf8"), root, { keepCase: true });
  }
  root.resolveAll();
  return root;
}

const root = loadRoot();

export const messages = {
  CheckRequest: root.lookupType("envoy.service.auth.v3.CheckRequest"),
  CheckResponse: root.lookupType("envoy.service.auth.v3.CheckResponse"),
  RateLimitRequest: root.lookupType("envoy.service.ratelimit.v3.RateLimitRequest"),
  RateLimitResponse: root.lookupType("envoy.service.ratelimit.v3.RateLimitResponse"),
  HealthCheckRequest: root.lookupType("grpc.health.v1.HealthCheckRequest"),
  HealthCheckResponse: root.lookupType("grpc.health.v1.HealthCheckResponse"),
};
