// ShouldRateLimit as the gRPC listener serves it: the RateLimitRequest read, the decision of
// rls.ts (in a span when tracing is on), the RateLimitResponse written.
import { requestIdOf } from "../../process/request-id.js";
import { tracedRls } from "../../tracing/check-span.js";
import type { Tracing } from "../../tracing/tracing.js";
import { traceHeadersOf } from "../trace-headers.js";
import type { GrpcMethod } from "./grpc-protocol.js";
import type { GrpcService } from "./listener.js";
import type { RlsDecide } from "./rls.js";
import { readRateLimitRequest, writeRateLimitResponse } from "./rls-codec.js";
import { rlsInput } from "./rls-input.js";

export const RATE_LIMIT_SERVICE = "envoy.service.ratelimit.v3.RateLimitService";
export const SHOULD_RATE_LIMIT = `/${RATE_LIMIT_SERVICE}/ShouldRateLimit`;

export function rateLimitService(decide: RlsDecide, tracing: Tracing | undefined): GrpcService {
  const method: GrpcMethod = {
    kind: "unary",
    // A decision made at once (nothing counted: a cached refusal, no limit) is written at once; a
    // failure thrown here is answered as a rejected one would be (grpc-call.ts).
    handle(bytes, call) {
      const input = rlsInput(readRateLimitRequest(bytes));
      input.requestId = requestIdOf(call.headers?.["x-request-id"]);
      input.caller = call;
      if (tracing !== undefined) {
        const caller = traceHeadersOf(call.headers);
        const span = { transport: "envoy-grpc", caller, requestId: input.requestId, domain: input.domain };
        return tracedRls(tracing, span, () => decide(input)).then(writeRateLimitResponse);
      }
      const answer = decide(input);
      return answer instanceof Promise ? answer.then(writeRateLimitResponse) : writeRateLimitResponse(answer);
    },
  };
  // envoyproxy/ratelimit reports its health as "ratelimit": an Envoy grpc_health_check or a
  // Kubernetes gRPC probe written for it keeps working against tollgate.
  return { name: RATE_LIMIT_SERVICE, healthNames: ["ratelimit"], methods: [[SHOULD_RATE_LIMIT, method]] };
}
