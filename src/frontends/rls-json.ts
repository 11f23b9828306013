// envoyproxy/ratelimit's JSON endpoint, on the check listener: `POST /json` with a RateLimitRequest
// in protobuf's JSON mapping, answered with the RateLimitResponse in the same mapping, 200 when the
// overall code is OK and 429 when it is OVER_LIMIT. For debugging and simple clients: the same
// decision as ShouldRateLimit over gRPC.
import { isUtf8 } from "node:buffer";
import { isWholeNumberText, parseWholeNumber, wholeNumberRange } from "../config/numbers.js";
import { requestIdOf } from "../process/request-id.js";
import { tracedRls } from "../tracing/check-span.js";
import type { Tracing } from "../tracing/tracing.js";
import { GrpcError, GrpcStatus } from "./envoy-grpc/grpc-protocol.js";
import type { RlsDecide } from "./envoy-grpc/rls.js";
import type { DecodedDescriptor, RlsAnswer } from "./envoy-grpc/rls-codec.js";
import { MAX_UINT32, RLS_UNITS, type RlsInput, rlsInput } from "./envoy-grpc/rls-input.js";
import { type HttpRoute, methodAnswer } from "./http-check.js";
import type { Exchange } from "./http1/exchange.js";
import { traceHeadersOf } from "./trace-headers.js";

/**
 * A request body larger than this is refused 413 by the check listener, which reads it (the gRPC
 * listener takes 4 MiB; JSON is for debugging).
 */
const MAX_BODY_BYTES = 1024 * 1024;

const CODE_NAMES = ["UNKNOWN", "OK", "OVER_LIMIT"];
const UNIT_VALUE = new Map<string, number>(
  Object.entries(RLS_UNITS).map(([name, value]) => [name.toUpperCase(), value]),
);
const UNIT_NAME = new Map<number, string>(
  Object.entries(RLS_UNITS).map(([name, value]) => [value, name.toUpperCase()]),
);

type Json = Record<string, unknown>;

const UINT32 = wholeNumberRange(0, MAX_UINT32);
const UINT64 = `a whole number from 0 to 18446744073709551615, in decimal digits only`;

/** A field in protobuf's JSON mapping: lowerCamelCase, or the proto's own name (both are accepted). */
function field(object: Json, camel: string, snake: string): unknown {
  return object[camel] ?? object[snake];
}

/**
 * A uint32 as protobuf's JSON mapping writes it: a whole JSON number, or a string of decimal digits
 * (config/numbers.ts: no sign, space or leading zero). Past 2^32 - 1 it is no uint32: refused.
 */
function uint32(value: unknown): number | undefined {
  if (typeof value === "string") return parseWholeNumber(value, 0, MAX_UINT32);
  return typeof value === "number" && Number.isInteger(value) && value >= 0 && value <= MAX_UINT32
    ? value
    : undefined;
}

const MAX_UINT64 = 2n ** 64n - 1n;

/**
 * A descriptor's hits_addend, a UInt64Value: as a uint32 but up to 2^64 - 1, and taken as at most
 * 2^32 - 1 (rlsInput: more hits than that are refused by every limit as surely).
 */
function uint64(value: unknown): number | undefined {
  if (typeof value === "string") {
    if (!isWholeNumberText(value) || value.length > 20 || BigInt(value) > MAX_UINT64) return undefined;
    return Math.min(Number(value), MAX_UINT32);
  }
  return typeof value === "number" && Number.isInteger(value) && value >= 0 && value <= Number(MAX_UINT64)
    ? Math.min(value, MAX_UINT32)
    : undefined;
}

/** A string field: itself, "" when left out or null (proto3's default); undefined for any other JSON. */
const text = (value: unknown): string | undefined =>
  value === undefined || value === null ? "" : typeof value === "string" ? value : undefined;

/** A unit by its enum name (`MINUTE`) or number (2); undefined for any other, UNKNOWN (0) included. */
const unitOf = (unit: unknown): number | undefined =>
  typeof unit === "number" ? (UNIT_NAME.has(unit) ? unit : undefined) : UNIT_VALUE.get(String(unit));

/** The request as the core reads it, or a message saying what is wrong with it. */
export function jsonRequest(body: unknown): RlsInput | string {
  if (typeof body !== "object" || body === null || Array.isArray(body))
    return "the body must be a JSON object";
  const request = body as Json;
  const descriptors = request.descriptors ?? [];
  if (!Array.isArray(descriptors)) return "descriptors must be a list";
  // rlsInput bounds the count too; a list this long is not even walked.
  if (descriptors.length > 1024) return "too many descriptors";
  const decoded: DecodedDescriptor[] = [];
  for (const [i, item] of descriptors.entries()) {
    if (typeof item !== "object" || item === null) return `descriptors[${i}] must be an object`;
    const d = item as Json;
    const entries = d.entries ?? [];
    if (!Array.isArray(entries)) return `descriptors[${i}].entries must be a list`;
    const pairs: { key: string; value: string }[] = [];
    for (const [j, entry] of entries.entries()) {
      if (typeof entry !== "object" || entry === null || Array.isArray(entry)) {
        return `descriptors[${i}].entries[${j}] must be an object`;
      }
      // proto3's JSON mapping: a field left out, or null, is its default (""), as the reference's
      // protojson reads it; an entry without a key then matches nothing, and is answered OK.
      const key = text((entry as Json).key);
      const value = text((entry as Json).value);
      if (key === undefined || value === undefined) {
        return `descriptors[${i}].entries[${j}] needs a string key and value`;
      }
      pairs.push({ key, value });
    }
    const limit = d.limit as Json | undefined;
    let override: DecodedDescriptor["limit"];
    if (limit !== undefined && limit !== null) {
      const unit = field(limit, "unit", "unit");
      const unitValue = unitOf(unit);
      // Left out or null, requestsPerUnit is 0 (a limit that refuses every hit), as protojson reads it.
      const perUnit = uint32(field(limit, "requestsPerUnit", "requests_per_unit") ?? 0);
      if (unitValue === undefined || perUnit === undefined) {
        return `descriptors[${i}].limit needs requestsPerUnit (${UINT32}) and a unit (SECOND … YEAR, WEEK)`;
      }
      override = { requests_per_unit: perUnit, unit: unitValue };
    }
    const addend = field(d, "hitsAddend", "hits_addend");
    if (addend !== undefined && addend !== null && uint64(addend) === undefined) {
      return `descriptors[${i}].hitsAddend must be ${UINT64}`;
    }
    const negative = field(d, "isNegativeHits", "is_negative_hits");
    if (negative !== undefined && typeof negative !== "boolean") {
      return `descriptors[${i}].isNegativeHits must be true or false`;
    }
    decoded.push({
      entries: pairs,
      limit: override ?? null,
      hits_addend: addend === undefined || addend === null ? null : { value: uint64(addend) ?? 0 },
      is_negative_hits: negative === true,
    });
  }
  const addend = field(request, "hitsAddend", "hits_addend");
  if (addend !== undefined && uint32(addend) === undefined) return `hitsAddend must be ${UINT32}`;
  try {
    return rlsInput({
      domain: typeof request.domain === "string" ? request.domain : "",
      descriptors: decoded,
      hits_addend: uint32(addend) ?? 0,
    });
  } catch (error) {
    if (error instanceof GrpcError) return error.message;
    throw error;
  }
}

/** The answer in protobuf's JSON mapping: lowerCamelCase, enums by name, durations as "1.5s". */
export function jsonAnswer(answer: RlsAnswer): Json {
  return {
    overallCode: CODE_NAMES[answer.overall_code] ?? "UNKNOWN",
    statuses: answer.statuses.map((status) => ({
      code: CODE_NAMES[status.code] ?? "UNKNOWN",
      ...(status.current_limit === undefined
        ? {}
        : {
            currentLimit: {
              // proto3 JSON leaves out a field at its default (a limit of 0, as the reference's protojson).
              ...(status.current_limit.name === undefined ? {} : { name: status.current_limit.name }),
              ...(status.current_limit.requests_per_unit === 0
                ? {}
                : { requestsPerUnit: status.current_limit.requests_per_unit }),
              unit: UNIT_NAME.get(status.current_limit.unit) ?? "UNKNOWN",
            },
          }),
      ...(status.limit_remaining === 0 ? {} : { limitRemaining: status.limit_remaining }),
      ...(status.duration_until_reset === undefined
        ? {}
        : {
            durationUntilReset: `${status.duration_until_reset.seconds + status.duration_until_reset.nanos / 1e9}s`,
          }),
    })),
    ...(answer.response_headers_to_add === undefined
      ? {}
      : { responseHeadersToAdd: answer.response_headers_to_add }),
  };
}

function send(exchange: Exchange, status: number, body: unknown): void {
  exchange.respond({ status, headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
}

/** `POST /json` on the check listener, answered by `decide` (undefined: the RLS is off). */
export function rlsJsonRoute(decide: () => RlsDecide | undefined, tracing: Tracing | undefined): HttpRoute {
  return {
    paths: [{ path: "/json", subpaths: false }],
    usage: "POST /json (envoyproxy/ratelimit's JSON endpoint)",
    maxBodyBytes: MAX_BODY_BYTES,
    serve(req: Exchange) {
      const core = decide();
      if (core === undefined) {
        send(req, 404, { error: "not_found", message: "The rate limit service is off: RLS_CONFIG is unset" });
        return;
      }
      if (req.method !== "POST") {
        req.respond(methodAnswer(req.method, "/json", ["POST"]));
        return;
      }
      const raw = req.body ?? Buffer.alloc(0);
      // JSON is UTF-8 (the reference's protojson refuses anything else): read leniently, a byte
      // that is not would become U+FFFD, and count apart from the same bytes sent over gRPC.
      if (!isUtf8(raw)) {
        send(req, 400, { error: "bad_request", message: "The body is not UTF-8" });
        return;
      }
      let body: unknown;
      try {
        body = JSON.parse(raw.toString("utf8"));
      } catch {
        send(req, 400, { error: "bad_request", message: "The body is not JSON" });
        return;
      }
      const input = jsonRequest(body);
      if (typeof input === "string") {
        send(req, 400, { error: "bad_request", message: input });
        return;
      }
      input.requestId = requestIdOf(req.headers["x-request-id"]);
      // A promise either way: the decision may be made at once (or refused at once, by throwing).
      const answered: Promise<RlsAnswer> =
        tracing === undefined
          ? new Promise((resolve) => resolve(core(input)))
          : tracedRls(
              tracing,
              {
                transport: "json",
                caller: traceHeadersOf(req.headers),
                requestId: input.requestId,
                domain: input.domain,
              },
              () => core(input),
            );
      answered.then(
        (answer) => send(req, answer.overall_code === 2 ? 429 : 200, jsonAnswer(answer)),
        (error: unknown) => {
          if (error instanceof GrpcError && error.code === GrpcStatus.INVALID_ARGUMENT) {
            send(req, 400, { error: "bad_request", message: error.message });
          } else {
            send(req, 503, { error: "unavailable", message: "The rate-limit store is unavailable" });
          }
        },
      );
    },
  };
}
