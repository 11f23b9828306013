// A RateLimitRequest as the rate limit service reads it: the domain, each descriptor's entries,
// its own limit and its addend, checked and bounded before anything is counted.
import type { Caller } from "../../ratelimit/limiter.js";
import { GrpcError, GrpcStatus } from "./grpc-protocol.js";
import { type DecodedRequest, MAX_DESCRIPTORS, MAX_ENTRIES } from "./rls-codec.js";

/** The units of Envoy's API, by their enum value in RateLimitResponse.RateLimit.Unit. */
export const RLS_UNITS = {
  second: 1,
  minute: 2,
  hour: 3,
  day: 4,
  month: 5,
  year: 6,
  week: 7,
} as const;
export type RlsUnitName = keyof typeof RLS_UNITS;
const UNIT_NAMES = new Map<number, RlsUnitName>(
  Object.entries(RLS_UNITS).map(([name, value]) => [value, name as RlsUnitName]),
);

export type RequestDescriptor = {
  entries: readonly { key: string; value: string }[];
  limit: { requestsPerUnit: number; unit: RlsUnitName } | undefined;
};

export const MAX_UINT32 = 4_294_967_295;

function numberOf(value: number | { toNumber(): number } | undefined): number | undefined {
  if (value === undefined) return undefined;
  return typeof value === "number" ? value : value.toNumber();
}

const NO_ENTRIES: readonly { key: string; value: string }[] = [];

/** A descriptor's entries, every key and value a string: the decoded ones when they already are. */
function entriesOf(
  decoded: { key?: string; value?: string }[] | undefined,
): readonly { key: string; value: string }[] {
  if (decoded === undefined) return NO_ENTRIES;
  for (const e of decoded) {
    if (typeof e.key !== "string" || typeof e.value !== "string") {
      return decoded.map((d) => ({ key: d.key ?? "", value: d.value ?? "" }));
    }
  }
  return decoded as { key: string; value: string }[];
}

/** A ShouldRateLimit request as the core reads it. */
export type RlsInput = {
  domain: string;
  descriptors: RequestDescriptor[];
  addends: number[];
  /** The call's x-request-id, for log lines; set by the transport. */
  requestId: string | undefined;
  /** The gRPC call, which may leave before its answer (see Caller); set by the transport. */
  caller?: Caller | undefined;
};

/** A RateLimitRequest as protobufjs decodes it (or as `POST /json` parses it), checked. */
export function rlsInput(message: DecodedRequest): RlsInput {
  const domain = message.domain ?? "";
  // As the reference: a request must name its domain and carry at least one descriptor.
  if (domain === "") throw new GrpcError(GrpcStatus.INVALID_ARGUMENT, "rate limit domain must not be empty");
  const decoded = message.descriptors ?? [];
  if (decoded.length === 0) {
    throw new GrpcError(GrpcStatus.INVALID_ARGUMENT, "rate limit descriptor list must not be empty");
  }
  if (decoded.length > MAX_DESCRIPTORS) {
    throw new GrpcError(
      GrpcStatus.INVALID_ARGUMENT,
      `at most ${MAX_DESCRIPTORS} descriptors per request (this one has ${decoded.length})`,
    );
  }
  const requestAddend = message.hits_addend || 1;
  const descriptors: RequestDescriptor[] = [];
  const addends: number[] = [];
  for (const d of decoded) {
    if ((d.entries?.length ?? 0) > MAX_ENTRIES) {
      throw new GrpcError(GrpcStatus.INVALID_ARGUMENT, `at most ${MAX_ENTRIES} entries per descriptor`);
    }
    const entries = entriesOf(d.entries);
    const unit = d.limit == null ? undefined : UNIT_NAMES.get(d.limit.unit ?? 0);
    descriptors.push({
      entries,
      limit:
        d.limit == null || unit === undefined
          ? undefined
          : { requestsPerUnit: d.limit.requests_per_unit ?? 0, unit },
    });
    // A descriptor's own hits_addend wins whenever it is set, 0 included (a look that counts
    // nothing), as the reference's GetHitsAddends reads it; the request's applies where it is not.
    const own = d.hits_addend == null ? undefined : (numberOf(d.hits_addend.value) ?? 0);
    // A refund (is_negative_hits) gives nothing back here: the descriptor is looked at, not counted.
    const addend = d.is_negative_hits === true ? 0 : (own ?? requestAddend);
    // More than a uint32 of hits is refused by every limit as surely as 2^32 - 1 is.
    addends.push(Math.min(addend, MAX_UINT32));
  }
  return { domain, descriptors, addends, requestId: undefined };
}
