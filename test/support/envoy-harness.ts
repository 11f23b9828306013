// An HTTP proxy that behaves as Envoy does with envoy/envoy.yaml (ext_authz HTTP filter) or
// envoy/envoy-grpc.yaml (ext_authz over gRPC), for e2e tests. There is no Envoy binary here;
// docs/envoy-notes.md is the specification this imitates, envoy-ext-authz-grpc.ts says where its gRPC
// mode comes from.
import { randomUUID } from "node:crypto";
import {
  Agent,
  createServer,
  type IncomingMessage,
  type OutgoingHttpHeaders,
  request,
  type ServerResponse,
} from "node:http";
import { type AddressInfo, isIP } from "node:net";
import {
  type EnvoyConfig,
  type EnvoyRoute,
  type EnvoyYamlName,
  envoyYamlText,
  loadEnvoyConfig,
} from "./envoy-config.js";
import {
  appendXff,
  applyAllow,
  callCheck,
  type Exchange,
  type HeaderList,
  HOP_BY_HOP,
  headerList,
} from "./envoy-ext-authz.js";
import {
  applyGrpcAllow,
  applyResponseMutations,
  callGrpcCheck,
  EXT_AUTHZ_NAMESPACE,
} from "./envoy-ext-authz-grpc.js";
import { type AuthorizationClient, authorizationClient } from "./grpc-client.js";

export type EnvoyHarnessOptions = {
  /** Where each cluster of envoy.yaml really runs: name → base URLs (several are used round robin). */
  clusters: Record<string, string | readonly string[]>;
  /** The text of an envoy.yaml; the repository's `config` file when absent. */
  yaml?: string;
  /** Which of the repository's files to imitate when `yaml` is absent: envoy.yaml (HTTP ext_authz, the
   * default) or envoy-grpc.yaml (ext_authz over gRPC; its cluster tollgate_grpc is a gRPC listener). */
  config?: EnvoyYamlName;
  /** Envoy's own address, which its HTTP client appends to a check's X-Forwarded-For. */
  envoyAddress?: string;
  /**
   * Replaces the yaml's check timeout. Only for bursts of hundreds of requests: the harness shares
   * the test's event loop with the client that sends them, so its timer would also count that
   * process's own queueing, which a real Envoy's timer does not.
   */
  checkTimeoutMs?: number;
};

/** One access-log record per response sent: what %RESPONSE_CODE%, %RESPONSE_FLAGS% and %DYNAMIC_METADATA% print. */
export type AccessLogEntry = {
  method: string;
  path: string;
  status: number;
  flags: string[];
  /** By namespace; ext_authz over gRPC writes CheckResponse.dynamic_metadata under envoy.filters.http.ext_authz. */
  dynamicMetadata: Record<string, Record<string, unknown>>;
};

export type EnvoyHarness = {
  url: string;
  config: EnvoyConfig;
  accessLog: AccessLogEntry[];
  close(): Promise<void>;
};

type LocalReply = { status: number; body: string; headers: HeaderList; flags: string[] };
type Cluster = { urls: URL[]; agent: Agent; next: number };

const DEFAULT_ENVOY_ADDRESS = "10.89.0.10";

function outgoing(headers: Iterable<[string, string[]]>): OutgoingHttpHeaders {
  const out: OutgoingHttpHeaders = {};
  for (const [name, values] of headers) {
    if (!HOP_BY_HOP.has(name)) out[name] = values.length === 1 ? values[0] : values;
  }
  return out;
}

/** The entry `skip` places from the right of X-Forwarded-For, when it is an IP address. */
function fromXff(xff: string | undefined, skip: number): string | undefined {
  const entries = (xff ?? "").split(",").map((e) => e.trim());
  const entry = entries[entries.length - 1 - skip];
  return entry !== undefined && isIP(entry) !== 0 ? entry : undefined;
}

function normalise(path: string, config: EnvoyConfig): string {
  let result = config.mergeSlashes ? path.replace(/\/{2,}/g, "/") : path;
  if (config.normalizePath) {
    const segments: string[] = [];
    for (const segment of result.split("/").slice(1)) {
      if (segment === "..") segments.pop();
      else if (segment !== ".") segments.push(segment);
    }
    result = `/${segments.join("/")}`;
  }
  return result;
}

export async function startEnvoyHarness(options: EnvoyHarnessOptions): Promise<EnvoyHarness> {
  const loaded = loadEnvoyConfig(options.yaml ?? envoyYamlText(options.config ?? "envoy.yaml"));
  const { checkTimeoutMs } = options;
  const config: EnvoyConfig =
    checkTimeoutMs === undefined
      ? loaded
      : {
          ...loaded,
          filters: loaded.filters.map((f) =>
            f.kind === "ext_authz" || f.kind === "ext_authz_grpc" ? { ...f, timeoutMs: checkTimeoutMs } : f,
          ),
        };
  const envoyAddress = options.envoyAddress ?? DEFAULT_ENVOY_ADDRESS;
  const clusters = new Map<string, Cluster>();
  const used = [
    ...config.routes.map((r) => r.cluster),
    ...config.filters.flatMap((f) =>
      f.kind === "ext_authz" || f.kind === "ext_authz_grpc" ? [f.cluster] : [],
    ),
  ];
  for (const name of new Set(used)) {
    const given = options.clusters[name];
    const settings = config.clusters.get(name);
    if (given === undefined || settings === undefined) {
      throw new Error(
        `envoy harness: cluster ${name} needs ${settings ? "an address" : "a definition in envoy.yaml"}`,
      );
    }
    const urls = (typeof given === "string" ? [given] : given).map((u) => new URL(u));
    const agent = new Agent({
      keepAlive: true,
      maxSockets: settings.maxConnections,
      timeout: settings.idleTimeoutMs,
    });
    clusters.set(name, { urls, agent, next: 0 });
  }

  function pick(name: string): URL {
    const cluster = clusters.get(name) as Cluster;
    return cluster.urls[cluster.next++ % cluster.urls.length] as URL;
  }
  const agentOf = (name: string) => (clusters.get(name) as Cluster).agent;
  /** One grpc-js channel per endpoint of a gRPC cluster, as Envoy keeps HTTP/2 connections open. */
  const grpcClients = new Map<string, AuthorizationClient>();
  function grpcClient(cluster: string, authority: string): AuthorizationClient {
    const target = pick(cluster).toString();
    let client = grpcClients.get(target);
    if (client === undefined) {
      client = authorizationClient(target, authority);
      grpcClients.set(target, client);
    }
    return client;
  }
  const accessLog: AccessLogEntry[] = [];
  /** What the access log will say of each response still being sent. */
  const logOf = new WeakMap<ServerResponse, AccessLogEntry>();

  /** The connection manager: path checks and normalisation, X-Forwarded-For, x-request-id, route. */
  function connectionManager(req: IncomingMessage): Exchange | LocalReply {
    const raw = req.url ?? "/";
    const query = raw.indexOf("?");
    const rawPath = query === -1 ? raw : raw.slice(0, query);
    const badHeader = config.rejectHeadersWithUnderscores && headerList(req).some(([n]) => n.includes("_"));
    if (!rawPath.startsWith("/") || badHeader || (config.rejectEscapedSlashes && /%(2f|5c)/i.test(rawPath))) {
      return { status: 400, body: "Bad Request", headers: [], flags: [] };
    }
    const pathOnly = normalise(rawPath, config);
    const headers = new Map<string, string[]>();
    for (const [name, value] of headerList(req)) headers.set(name, [...(headers.get(name) ?? []), value]);
    const peer = (req.socket.remoteAddress ?? "").replace(/^::ffff:(?=\d+\.)/, "");
    const xff = headers.get("x-forwarded-for")?.join(",");
    let address: string | undefined;
    if (config.useRemoteAddress) {
      if (config.xffNumTrustedHops > 0) address = fromXff(xff, config.xffNumTrustedHops - 1);
      headers.set("x-forwarded-for", [appendXff(xff, peer)]);
      headers.set("x-forwarded-proto", ["http"]);
    } else {
      address = fromXff(xff, config.xffNumTrustedHops);
    }
    // Every peer counts as external here (an edge request): its x-request-id is replaced.
    if (!headers.has("x-request-id") || (config.useRemoteAddress && !config.preserveExternalRequestId)) {
      headers.set("x-request-id", [randomUUID()]);
    }
    const route = config.routes.find((r) =>
      "path" in r.match ? pathOnly === r.match.path : pathOnly.startsWith(r.match.prefix),
    );
    return {
      method: req.method ?? "GET",
      path: query === -1 ? pathOnly : `${pathOnly}${raw.slice(query)}`,
      headers,
      downstream:
        address === undefined ? { address: peer, port: req.socket.remotePort ?? 0 } : { address, port: 0 },
      peer: { address: peer, port: req.socket.remotePort ?? 0 },
      local: { address: req.socket.localAddress ?? "", port: req.socket.localPort ?? 0 },
      route,
      responseHeadersToAdd: [],
      responseHeaderMutations: [],
      dynamicMetadata: {},
    };
  }

  /** A local reply; after an allowing check, the check's response headers go on it too. */
  function sendLocal(res: ServerResponse, reply: LocalReply, exchange?: Exchange): void {
    const entry = logOf.get(res);
    if (entry !== undefined) entry.flags = reply.flags;
    let { status, body } = reply;
    const headers = new Map<string, string[]>();
    for (const [name, value] of reply.headers) {
      if (name !== "content-length") headers.set(name, [...(headers.get(name) ?? []), value]);
    }
    const mapper = config.localReplies.find((m) => m.matches(status, new Set(reply.flags)));
    if (mapper?.statusCode !== undefined) status = mapper.statusCode;
    if (mapper?.body !== undefined) {
      body = mapper.body.text;
      headers.set("content-type", [mapper.body.contentType]);
    }
    for (const [name, value] of mapper?.headers ?? []) headers.set(name, [value]);
    if (body !== "" && !headers.has("content-type")) headers.set("content-type", ["text/plain"]);
    for (const [name, value] of exchange?.responseHeadersToAdd ?? [])
      headers.set(name, [...(headers.get(name) ?? []), value]);
    applyResponseMutations(headers, exchange?.responseHeaderMutations ?? []);
    headers.set("server", ["envoy"]);
    res.writeHead(status, outgoing(headers));
    res.end(body);
  }

  function forward(req: IncomingMessage, res: ServerResponse, exchange: Exchange, route: EnvoyRoute): void {
    const target = pick(route.cluster);
    const headers = outgoing(exchange.headers);
    headers["x-envoy-expected-rq-timeout-ms"] = String(route.timeoutMs);
    const upstream = request(
      {
        host: target.hostname,
        port: target.port,
        method: exchange.method,
        path: exchange.path,
        headers,
        agent: agentOf(route.cluster),
      },
      (upRes) => {
        clearTimeout(timer);
        const out = new Map<string, string[]>();
        for (const [name, value] of headerList(upRes)) out.set(name, [...(out.get(name) ?? []), value]);
        for (const [name, value] of exchange.responseHeadersToAdd)
          out.set(name, [...(out.get(name) ?? []), value]);
        applyResponseMutations(out, exchange.responseHeaderMutations);
        out.set("server", ["envoy"]);
        res.writeHead(upRes.statusCode ?? 502, outgoing(out));
        upRes.pipe(res);
      },
    );
    const fail = (status: number, body: string, flag: string) => {
      clearTimeout(timer);
      upstream.destroy();
      if (!res.headersSent) sendLocal(res, { status, body, headers: [], flags: [flag] }, exchange);
      else res.destroy();
    };
    const timer = setTimeout(() => fail(504, "upstream request timeout", "UT"), route.timeoutMs);
    upstream.on("error", () =>
      fail(
        503,
        "upstream connect error or disconnect/reset before headers. reset reason: connection failure",
        "UF",
      ),
    );
    req.pipe(upstream);
  }

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const exchange = connectionManager(req);
    const entry: AccessLogEntry = {
      method: req.method ?? "GET",
      path: "route" in exchange ? exchange.path : (req.url ?? "/"),
      status: 0,
      flags: [],
      dynamicMetadata: "route" in exchange ? exchange.dynamicMetadata : {},
    };
    logOf.set(res, entry);
    res.on("close", () => {
      entry.status = res.statusCode;
      accessLog.push(entry);
    });
    if (!("route" in exchange)) {
      req.resume();
      sendLocal(res, exchange);
      return;
    }
    const { route } = exchange;
    for (const filter of config.filters) {
      if (route?.disabledFilters.has(filter.name)) continue;
      if (filter.kind === "header_mutation") {
        for (const name of filter.removeFromRequest) exchange.headers.delete(name);
      } else if (filter.kind === "ext_authz") {
        if (route === undefined) continue; // ext_authz skips requests without a route
        const outcome = await callCheck({
          settings: filter,
          exchange,
          envoyAddress,
          target: pick(filter.cluster),
          agent: agentOf(filter.cluster),
        });
        if (outcome.kind === "allow") {
          applyAllow(filter, exchange, outcome.headers);
        } else if (outcome.kind === "deny") {
          req.resume();
          const headers = outcome.headers.filter(([name]) => filter.clientHeader(name));
          sendLocal(res, { status: outcome.status, body: outcome.body, headers, flags: ["UAEX"] });
          return;
        } else if (filter.failureModeAllow) {
          if (filter.failureModeAllowHeaderAdd)
            exchange.headers.set("x-envoy-auth-failure-mode-allowed", ["true"]);
        } else {
          req.resume();
          sendLocal(res, { status: filter.statusOnError, body: "", headers: [], flags: ["UAEX"] });
          return;
        }
      } else if (filter.kind === "ext_authz_grpc") {
        if (route === undefined) continue;
        const startedAt = performance.now();
        const outcome = await callGrpcCheck({
          settings: filter,
          exchange,
          client: grpcClient(filter.cluster, filter.authority),
        });
        if (outcome.kind === "allow") {
          applyGrpcAllow(exchange, outcome, startedAt);
        } else if (outcome.kind === "deny") {
          if (outcome.metadata !== undefined)
            exchange.dynamicMetadata[EXT_AUTHZ_NAMESPACE] = outcome.metadata;
          req.resume();
          sendLocal(res, {
            status: outcome.status,
            body: outcome.body,
            headers: outcome.headers,
            flags: ["UAEX"],
          });
          return;
        } else if (filter.failureModeAllow) {
          if (filter.failureModeAllowHeaderAdd)
            exchange.headers.set("x-envoy-auth-failure-mode-allowed", ["true"]);
        } else {
          req.resume();
          sendLocal(res, { status: filter.statusOnError, body: "", headers: [], flags: ["UAEX"] });
          return;
        }
      } else {
        if (route === undefined) {
          req.resume();
          sendLocal(res, { status: 404, body: "", headers: [], flags: ["NR"] });
        } else {
          forward(req, res, exchange, route);
        }
        return;
      }
    }
    throw new Error("envoy harness: the filter chain has no router");
  }

  const server = createServer((req, res) => {
    handle(req, res).catch((error: unknown) => {
      // A harness fault must fail the test loudly, never pass for tollgate's answer.
      if (!res.headersSent) res.writeHead(599, { "content-type": "text/plain" });
      res.end(`envoy harness error: ${(error as Error).stack ?? String(error)}`);
    });
  });
  server.keepAliveTimeout = config.idleTimeoutMs;
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    config,
    accessLog,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
        for (const cluster of clusters.values()) cluster.agent.destroy();
        for (const client of grpcClients.values()) client.close();
      }),
  };
}
