// grpc.health.v1.Health: SERVING once tollgate is ready, NOT_SERVING before that and from the stop
// signal on, for the whole server ("") and each of its services. Envoy's grpc_health_check and
// Kubernetes' gRPC probes ask Check; Watch streams every change.
import type { Phase, Readiness } from "../../process/readiness.js";
import { GrpcError, type GrpcMethod, GrpcStatus } from "./grpc-protocol.js";
import { messages } from "./protos.js";

/** grpc.health.v1.HealthCheckResponse.ServingStatus */
const SERVING = 1;
const NOT_SERVING = 2;
const SERVICE_UNKNOWN = 3;

export const HEALTH_CHECK = "/grpc.health.v1.Health/Check";
export const HEALTH_WATCH = "/grpc.health.v1.Health/Watch";

function encodeStatus(status: number): Uint8Array {
  return messages.HealthCheckResponse.encode({ status }).finish();
}

function serviceOf(request: Uint8Array): string {
  try {
    return (messages.HealthCheckRequest.decode(request) as { service?: string }).service ?? "";
  } catch {
    throw new GrpcError(GrpcStatus.INVALID_ARGUMENT, "the HealthCheckRequest cannot be decoded");
  }
}

/**
 * The health service's two methods, and `drain()` for the listener to call when it starts to
 * drain (NOT_SERVING from then on, whatever the readiness says).
 */
export function createHealthService(options: {
  /** The services the server offers, by full name ("" is the server as a whole and always known). */
  services: readonly string[];
  readiness: Readiness | undefined;
}) {
  const known = new Set(["", ...options.services]);
  const { readiness } = options;
  let draining = false;
  const watchers = new Set<() => void>();
  const servingStatus = (phase: Phase = readiness?.phase() ?? "ready") =>
    !draining && phase === "ready" ? SERVING : NOT_SERVING;

  const check: GrpcMethod = {
    kind: "unary",
    handle(request) {
      const service = serviceOf(request);
      if (!known.has(service)) throw new GrpcError(GrpcStatus.NOT_FOUND, "unknown service");
      return encodeStatus(servingStatus());
    },
  };

  const watch: GrpcMethod = {
    kind: "server-stream",
    handle(request, call) {
      const service = serviceOf(request);
      if (!known.has(service)) {
        // The spec: SERVICE_UNKNOWN, and the call stays open in case the service appears.
        call.write(encodeStatus(SERVICE_UNKNOWN));
        return;
      }
      let last = servingStatus();
      call.write(encodeStatus(last));
      const update = () => {
        const now = servingStatus();
        if (now === last) return;
        last = now;
        call.write(encodeStatus(now));
      };
      watchers.add(update);
      const unsubscribe = readiness?.onChange(update);
      call.onClose(() => {
        watchers.delete(update);
        unsubscribe?.();
      });
    },
  };

  return {
    methods: [
      [HEALTH_CHECK, check],
      [HEALTH_WATCH, watch],
    ] as [string, GrpcMethod][],
    drain() {
      draining = true;
      for (const update of [...watchers]) update();
    },
  };
}
