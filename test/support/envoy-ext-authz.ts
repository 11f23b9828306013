// The harness's ext_authz HTTP filter: the check request Envoy builds, how it reads the answer, what an allow moves.
import { type Agent, type IncomingMessage, request } from "node:http";
import { isIP } from "node:net";
import { type EnvoyRoute, type ExtAuthzSettings, HEADER_FORMATTERS } from "./envoy-config.js";

export type HeaderList = Array<[string, string]>;

/** What ext_authz over gRPC does to a response header (ok_response.response_headers_to_add). */
export type ResponseHeaderAction = "add" | "set" | "add_if_absent" | "overwrite_if_exists";

/** Connection-specific headers the connection manager drops from every request it forwards. */
export const HOP_BY_HOP: ReadonlySet<string> = new Set([
  "connection",
  "keep-alive",
  "proxy-connection",
  "transfer-encoding",
  "upgrade",
  "te",
]);

/** One client request as the HTTP filters see it, after the connection manager. */
export type Exchange = {
  method: string;
  /** The normalised :path, query included. */
  path: string;
  headers: Map<string, string[]>;
  /** What %DOWNSTREAM_REMOTE_ADDRESS% stands for once the connection manager is done. */
  downstream: { address: string; port: number };
  /** The downstream connection's remote and local addresses (a gRPC check's source and destination). */
  peer: { address: string; port: number };
  local: { address: string; port: number };
  route: EnvoyRoute | undefined;
  /** allowed_client_headers_on_success, added to whatever response goes back. */
  responseHeadersToAdd: HeaderList;
  /** An allowing gRPC check's response_headers_to_add, applied to whatever response goes back. */
  responseHeaderMutations: Array<[ResponseHeaderAction, string, string]>;
  /** The stream's dynamic metadata by namespace (a gRPC check's CheckResponse.dynamic_metadata). */
  dynamicMetadata: Record<string, Record<string, unknown>>;
};

export type CheckOutcome =
  | { kind: "allow"; headers: HeaderList }
  | { kind: "deny"; status: number; body: string; headers: HeaderList }
  | { kind: "error" };

export const headerList = (message: IncomingMessage): HeaderList =>
  Object.entries(message.headersDistinct).flatMap(([name, values]) =>
    (values ?? []).map((value): [string, string] => [name, value]),
  );

export const appendXff = (xff: string | undefined, address: string): string =>
  xff === undefined || xff === "" ? address : `${xff},${address}`;

function format(value: string, exchange: Exchange): string {
  return value.replace(HEADER_FORMATTERS, (_all, command: string) => {
    const { address, port } = exchange.downstream;
    if (command === "DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT") return address;
    if (command === "DOWNSTREAM_REMOTE_ADDRESS") {
      return isIP(address) === 6 ? `[${address}]:${port}` : `${address}:${port}`;
    }
    const name = command.slice(4, -1).toLowerCase(); // REQ(name)
    return exchange.headers.get(name)?.join(",") ?? "";
  });
}

/** The check request's headers: allowed client headers, then headers_to_add, then the async client's. */
export function checkHeaders(
  settings: ExtAuthzSettings,
  exchange: Exchange,
  envoyAddress: string,
): Record<string, string> {
  const headers: Record<string, string> = { "content-length": "0" };
  for (const [name, values] of exchange.headers) {
    if (name !== "content-length" && settings.requestHeader(name) && !settings.disallowedHeader(name)) {
      headers[name] = values.join(",");
    }
  }
  for (const { key, value } of settings.headersToAdd) {
    const formatted = format(value, exchange);
    if (formatted !== "") headers[key] = formatted;
  }
  // What Envoy's async HTTP client adds to every request it sends.
  headers["x-envoy-internal"] = "true";
  headers["x-forwarded-for"] = appendXff(headers["x-forwarded-for"], envoyAddress);
  headers["x-envoy-expected-rq-timeout-ms"] = String(settings.timeoutMs);
  return headers;
}

/** Sends the check; exactly 200 allows, 5xx, a timeout or a failed connection are errors. */
export function callCheck(options: {
  settings: ExtAuthzSettings;
  exchange: Exchange;
  envoyAddress: string;
  target: URL;
  agent: Agent;
}): Promise<CheckOutcome> {
  const { settings, exchange, target } = options;
  return new Promise((resolve) => {
    const req = request(
      {
        host: target.hostname,
        port: target.port,
        method: exchange.method,
        path: `${settings.pathPrefix}${exchange.path}`,
        headers: checkHeaders(settings, exchange, options.envoyAddress),
        agent: options.agent,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (chunk: Buffer) => chunks.push(chunk));
        res.on("error", () => resolve({ kind: "error" }));
        res.on("end", () => {
          clearTimeout(timer);
          const status = res.statusCode ?? 0;
          const headers = headerList(res);
          if (status >= 500) resolve({ kind: "error" });
          else if (status === 200) resolve({ kind: "allow", headers });
          else resolve({ kind: "deny", status, body: Buffer.concat(chunks).toString("utf8"), headers });
        });
      },
    );
    const timer = setTimeout(() => {
      req.destroy();
      resolve({ kind: "error" });
    }, settings.timeoutMs);
    req.on("error", () => {
      clearTimeout(timer);
      resolve({ kind: "error" });
    });
    req.end();
  });
}

/** An allowing check: identity onto the upstream request (set, not append), limit headers for the response. */
export function applyAllow(settings: ExtAuthzSettings, exchange: Exchange, headers: HeaderList): void {
  const remove: string[] = [];
  for (const [name, value] of headers) {
    if (name === "x-envoy-auth-headers-to-remove") {
      remove.push(...value.split(",").map((n) => n.trim().toLowerCase()));
      continue;
    }
    if (settings.upstreamHeader(name)) exchange.headers.set(name, [value]);
    if (settings.upstreamHeaderToAppend(name)) {
      exchange.headers.set(name, [...(exchange.headers.get(name) ?? []), value]);
    }
    if (settings.clientHeaderOnSuccess(name)) exchange.responseHeadersToAdd.push([name, value]);
  }
  for (const name of remove) if (name !== "host" && !name.startsWith(":")) exchange.headers.delete(name);
}
