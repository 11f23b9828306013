// The gRPC listener on GRPC_PORT: one HTTP/2 server for the gRPC services it is given (Envoy's
// ext_authz Authorization; the rate limit service next), with grpc.health.v1 reporting each of them.
import type { CheckContext } from "../front-end.js";
import type { Listener, ListenerAddress } from "../listener.js";
import type { GrpcMethod } from "./grpc-protocol.js";
import { grpcListener } from "./grpc-server.js";
import { createHealthService } from "./health.js";

/**
 * A gRPC service: its full name (as health reports it), other names health knows it by (those
 * of a server it stands in for), and its methods by full path.
 */
export type GrpcService = {
  name: string;
  healthNames?: readonly string[];
  methods: readonly (readonly [string, GrpcMethod])[];
};

export function createGrpcListener(
  address: ListenerAddress,
  context: CheckContext,
  options: { services: readonly GrpcService[]; tls: { cert: string; key: string } | undefined },
): Listener {
  const health = createHealthService({
    services: options.services.flatMap((service) => [service.name, ...(service.healthNames ?? [])]),
    readiness: context.readiness,
  });
  const methods = new Map<string, GrpcMethod>([
    ...options.services.flatMap((service) => service.methods),
    ...health.methods,
  ]);
  const { tls } = options;
  return grpcListener(address, {
    methods,
    tls: tls === undefined ? undefined : { cert: Buffer.from(tls.cert), key: Buffer.from(tls.key) },
    observer: context.rpc,
    onError: (error, method, requestId) =>
      context.logger.error({ err: error, method, requestId }, "gRPC call failed unexpectedly"),
    onDrain: health.drain,
  });
}
