// ShouldRateLimit as the gRPC listener serves it: the RateLimitRequest read, the decision of
// rls.ts (in a span when tracing is on), the RateLimitResponse written.
import { requestIdOf } from "../../process/request-id.js";
import { tracedRls } from "../../tracing/check-span.js";
import type { Tracing } from "../../tracing/tracing.js";
import { traceHeadersOf } from "../trace-headers.js";
import type { GrpcMethod } from "./grpc-protocol.js";
import type { GrpcService } from "./listener.js";
import { type RlsAnswer, readRateLimitRequest, writeRateLimitResponse } from "./rls-codec.js";
import { type RlsInput, rlsInput } from "./rls-input.js";

export const RATE_LIMIT_SERVICE = "envoy.service.ratelimit.v3.RateLimitService";
export const SHOULD_RATE_LIMIT = `/${RATE_LIMIT_SERVICE}/ShouldRateLimit`;

export function rateLimitService(
  decide: (input: RlsInput) => Promise<RlsAnswer>,
  tracing: Tracing | undefined,
): GrpcService {
  const method: GrpcMethod = {
    kind: "unary",
    async handle(bytes, call) {
      const input = rlsInput(readRateLimitRequest(bytes));
      input.requestId = requestIdOf(call.headers?.["x-request-id"]);
      const answer =
        tracing === undefined
          ? await decide(input)
          : await tracedRls(
              tracing,
              {
                transport: "envoy-grpc",
                caller: traceHeadersOf(call.headers),
                requestId: input.requestId,
                domain: input.domain,
              },
              () => decide(input),
            );
      return writeRateLimitResponse(answer);
    },
  };
  return { name: RATE_LIMIT_SERVICE, methods: [[SHOULD_RATE_LIMIT, method]] };
}
