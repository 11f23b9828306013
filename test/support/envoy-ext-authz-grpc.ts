// The harness's ext_authz filter over gRPC (envoy/envoy-grpc.yaml): the CheckRequest Envoy builds, the
// call (grpc-js, not tollgate's own node:http2 framing), and what Envoy does with the CheckResponse.
//
// Written from Envoy's source (source/extensions/filters/common/ext_authz/check_request_utils.cc,
// ext_authz_grpc_impl.cc and source/extensions/filters/http/ext_authz/ext_authz.cc, the 1.36/1.37
// line, before envoyproxy/envoy#42878):
// - OkHttpResponse.headers: `append` true → appended to the request header with "," and only when it
//   exists; `append` false or absent → set (overwrite or add). `append_action` is not read there.
//   (After #42878 an absent `append` follows `append_action`, whose default APPEND_IF_EXISTS_OR_ADD
//   adds a second entry: tollgate states `append: false`, which both read as set.)
// - headers_to_remove: removed from the request, except ":"-headers and Host.
// - response_headers_to_add: `append` true → add, false → set; absent → `append_action`
//   (APPEND_IF_EXISTS_OR_ADD → add, ADD_IF_ABSENT, OVERWRITE_IF_EXISTS, OVERWRITE_IF_EXISTS_OR_ADD →
//   set), on whatever response the stream sends back.
// - any other gRPC status in a CheckResponse: a denial, a local reply with denied_response.status
//   (403 when absent or 0), its body, and those of its headers whose `append` is not true (the local
//   reply takes the "set" list only).
// - a failed call (transport error, non-OK grpc-status, deadline): an error.
// - dynamic_metadata (when it has fields) goes to the stream under envoy.filters.http.ext_authz, with
//   ext_authz_duration (ms) added on an allow.
import { randomBytes } from "node:crypto";
import type * as grpc from "@grpc/grpc-js";
import type { GrpcExtAuthzSettings } from "./envoy-config.js";
import { type Exchange, type HeaderList, HOP_BY_HOP, type ResponseHeaderAction } from "./envoy-ext-authz.js";
import type { AuthorizationClient, CheckResponse, HeaderOption, StructValue } from "./grpc-client.js";

export const EXT_AUTHZ_NAMESPACE = "envoy.filters.http.ext_authz";

export type GrpcCheckOutcome =
  | {
      kind: "allow";
      set: HeaderList;
      append: HeaderList;
      remove: string[];
      response: Array<[ResponseHeaderAction, string, string]>;
      metadata: Record<string, unknown> | undefined;
    }
  | {
      kind: "deny";
      status: number;
      body: string;
      headers: HeaderList;
      grpcStatus: number;
      metadata: Record<string, unknown> | undefined;
    }
  | { kind: "error"; code: number; details: string };

/** HeaderValueOption.HeaderAppendAction by number. */
const APPEND_ACTIONS: Record<number, ResponseHeaderAction> = {
  0: "add", // APPEND_IF_EXISTS_OR_ADD
  1: "add_if_absent", // ADD_IF_ABSENT
  2: "set", // OVERWRITE_IF_EXISTS_OR_ADD
  3: "overwrite_if_exists", // OVERWRITE_IF_EXISTS
};

const appendTrue = (option: HeaderOption): boolean => option.append?.value === true;
const entry = (option: HeaderOption): [string, string] => [
  option.header.key.toLowerCase(),
  option.header.value ?? "",
];

/** The CheckRequest Envoy builds for this request (no body, no TLS, no metadata or context extensions). */
export function grpcCheckRequest(exchange: Exchange): object {
  const headers: Record<string, string> = {};
  const put = (name: string, value: string) => {
    const before = headers[name];
    headers[name] = before === undefined ? value : `${before},${value}`;
  };
  // An HTTP/1.1 request's Host is :authority in Envoy's header map; its pseudo-headers come first.
  const host = exchange.headers.get("host")?.[0] ?? "";
  put(":authority", host);
  put(":path", exchange.path);
  put(":method", exchange.method);
  put(":scheme", "http");
  for (const [name, values] of exchange.headers) {
    if (name === "host" || HOP_BY_HOP.has(name)) continue;
    for (const value of values) put(name, value);
  }
  const socket = (at: { address: string; port: number }) => ({
    address: { socket_address: { address: at.address, port_value: at.port } },
  });
  return {
    attributes: {
      source: socket(exchange.peer),
      destination: socket(exchange.local),
      request: {
        http: {
          // Envoy's stream id, a random 64-bit number.
          id: randomBytes(8).readBigUInt64BE().toString(),
          method: exchange.method,
          headers,
          path: exchange.path,
          host,
          scheme: "http",
          // Bytes of the request received when the check starts: the headers are not counted and
          // no body has been read yet (the filter does not buffer it here).
          size: 0,
          protocol: "HTTP/1.1",
        },
      },
    },
  };
}

/** google.protobuf.Struct (as proto-loader decodes it) as plain JSON. */
function plain(value: StructValue): unknown {
  if (value.structValue !== undefined) return structJson(value.structValue);
  if (value.listValue !== undefined) return (value.listValue.values ?? []).map(plain);
  if (value.stringValue !== undefined) return value.stringValue;
  if (value.numberValue !== undefined) return value.numberValue;
  if (value.boolValue !== undefined) return value.boolValue;
  return null;
}

function structJson(struct: { fields?: Record<string, StructValue> }): Record<string, unknown> {
  return Object.fromEntries(Object.entries(struct.fields ?? {}).map(([key, value]) => [key, plain(value)]));
}

/** What Envoy makes of a CheckResponse that arrived. */
export function readCheckResponse(response: CheckResponse): GrpcCheckOutcome {
  const fields = response.dynamic_metadata?.fields;
  const metadata =
    fields === undefined || Object.keys(fields).length === 0
      ? undefined
      : structJson(response.dynamic_metadata ?? {});
  const code = response.status?.code ?? 0;
  if (code === 0) {
    const ok = response.ok_response ?? {};
    const headers = ok.headers ?? [];
    return {
      kind: "allow",
      set: headers.filter((o) => !appendTrue(o)).map(entry),
      append: headers.filter(appendTrue).map(entry),
      remove: (ok.headers_to_remove ?? []).map((name) => name.toLowerCase()),
      response: (ok.response_headers_to_add ?? []).map((option) => {
        const action: ResponseHeaderAction =
          option.append !== undefined && option.append !== null
            ? appendTrue(option)
              ? "add"
              : "set"
            : (APPEND_ACTIONS[option.append_action ?? 0] ?? "set");
        return [action, ...entry(option)];
      }),
      metadata,
    };
  }
  const denied = response.denied_response;
  return {
    kind: "deny",
    status: denied?.status?.code || 403,
    body: denied?.body ?? "",
    headers: (denied?.headers ?? []).filter((o) => !appendTrue(o)).map(entry),
    grpcStatus: code,
    metadata,
  };
}

/** One Check call with the configured timeout as its deadline; any failed call is an error. */
export function callGrpcCheck(options: {
  settings: GrpcExtAuthzSettings;
  exchange: Exchange;
  client: AuthorizationClient;
}): Promise<GrpcCheckOutcome> {
  const { settings, exchange, client } = options;
  return new Promise((resolve) => {
    client.Check(
      grpcCheckRequest(exchange),
      { deadline: Date.now() + settings.timeoutMs },
      (error: grpc.ServiceError | null, response?: CheckResponse) => {
        if (error !== null || response === undefined) {
          resolve({ kind: "error", code: error?.code ?? 13, details: error?.details ?? "no response" });
        } else {
          resolve(readCheckResponse(response));
        }
      },
    );
  });
}

/** An allowing answer on the upstream request: set, then append (to existing headers only), then remove. */
export function applyGrpcAllow(
  exchange: Exchange,
  outcome: Extract<GrpcCheckOutcome, { kind: "allow" }>,
  startedAt: number,
): void {
  for (const [name, value] of outcome.set) exchange.headers.set(name, [value]);
  for (const [name, value] of outcome.append) {
    const values = exchange.headers.get(name);
    // appendCopy onto the first entry, and nothing when the header is absent.
    if (values !== undefined && values.length > 0) values[0] = `${values[0]},${value}`;
  }
  for (const name of outcome.remove) {
    if (name !== "host" && !name.startsWith(":")) exchange.headers.delete(name);
  }
  exchange.responseHeaderMutations.push(...outcome.response);
  if (outcome.metadata !== undefined) {
    exchange.dynamicMetadata[EXT_AUTHZ_NAMESPACE] = {
      ...outcome.metadata,
      ext_authz_duration: Math.round(performance.now() - startedAt),
    };
  }
}

/** ext_authz's encodeHeaders: add, then set, then add-if-absent, then overwrite-if-exists. */
export function applyResponseMutations(
  headers: Map<string, string[]>,
  mutations: ReadonlyArray<[ResponseHeaderAction, string, string]>,
): void {
  const of = (action: ResponseHeaderAction) => mutations.filter(([a]) => a === action);
  for (const [, name, value] of of("add")) headers.set(name, [...(headers.get(name) ?? []), value]);
  for (const [, name, value] of of("set")) headers.set(name, [value]);
  for (const [, name, value] of of("add_if_absent")) if (!headers.has(name)) headers.set(name, [value]);
  for (const [, name, value] of of("overwrite_if_exists")) if (headers.has(name)) headers.set(name, [value]);
}
