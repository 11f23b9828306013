// The tests' OTLP/HTTP receiver: a node:http server taking POST /v1/traces as an OpenTelemetry
// collector does, keeping every export. OTLP JSON is decoded into spans; a protobuf export is kept
// as bytes (its trace ids appear in it verbatim).
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";

type AnyValue = {
  stringValue?: string;
  intValue?: number | string;
  boolValue?: boolean;
  doubleValue?: number;
};
type KeyValue = { key: string; value: AnyValue };

/** One span as an OTLP JSON export carries it, its attributes flattened. */
export type ReceivedSpan = {
  traceId: string;
  spanId: string;
  parentSpanId: string | undefined;
  name: string;
  /** 1 internal, 2 server, 3 client. */
  kind: number;
  attributes: Record<string, string | number | boolean>;
  /** The exporting service's resource attributes (service.name …). */
  resource: Record<string, string | number | boolean>;
  /** The span's status code: 0 unset, 1 ok, 2 error. */
  status: number;
};

export type Export = { path: string; contentType: string; headers: Record<string, unknown>; body: Buffer };

export type OtlpReceiver = {
  /** The base URL, as OTEL_EXPORTER_OTLP_ENDPOINT takes it. */
  url: string;
  exports: Export[];
  /** Every span of every JSON export so far. */
  spans(): ReceivedSpan[];
  /** Waits until `find` returns spans (non-empty), within `timeoutMs`. */
  waitFor(
    find: (spans: ReceivedSpan[]) => ReceivedSpan[],
    what: string,
    timeoutMs?: number,
  ): Promise<ReceivedSpan[]>;
  close(): Promise<void>;
};

function flatten(attributes: KeyValue[] | undefined): Record<string, string | number | boolean> {
  const out: Record<string, string | number | boolean> = {};
  for (const { key, value } of attributes ?? []) {
    const v = value.stringValue ?? value.boolValue ?? value.doubleValue ?? value.intValue;
    if (v !== undefined) out[key] = typeof v === "string" && value.intValue !== undefined ? Number(v) : v;
  }
  return out;
}

type JsonExport = {
  resourceSpans?: {
    resource?: { attributes?: KeyValue[] };
    scopeSpans?: {
      spans?: {
        traceId: string;
        spanId: string;
        parentSpanId?: string;
        name: string;
        kind: number;
        attributes?: KeyValue[];
        status?: { code?: number };
      }[];
    }[];
  }[];
};

function spansOf(body: Buffer): ReceivedSpan[] {
  const parsed = JSON.parse(body.toString("utf8")) as JsonExport;
  return (parsed.resourceSpans ?? []).flatMap((rs) => {
    const resource = flatten(rs.resource?.attributes);
    return (rs.scopeSpans ?? []).flatMap((ss) =>
      (ss.spans ?? []).map((span) => ({
        traceId: span.traceId,
        spanId: span.spanId,
        parentSpanId: span.parentSpanId === "" ? undefined : span.parentSpanId,
        name: span.name,
        kind: span.kind,
        attributes: flatten(span.attributes),
        resource,
        status: span.status?.code ?? 0,
      })),
    );
  });
}

export async function startOtlpReceiver(): Promise<OtlpReceiver> {
  const exports: Export[] = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => {
      const contentType = String(req.headers["content-type"] ?? "");
      exports.push({ path: req.url ?? "", contentType, headers: req.headers, body: Buffer.concat(chunks) });
      // An empty ExportTraceServiceResponse: everything accepted.
      const json = contentType.includes("json");
      res.writeHead(200, { "content-type": json ? "application/json" : "application/x-protobuf" });
      res.end(json ? "{}" : "");
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  const spans = () =>
    exports
      .filter((e) => e.path === "/v1/traces" && e.contentType.includes("json"))
      .flatMap((e) => spansOf(e.body));
  return {
    url: `http://127.0.0.1:${port}`,
    exports,
    spans,
    async waitFor(find, what, timeoutMs = 10_000) {
      const until = Date.now() + timeoutMs;
      for (;;) {
        const found = find(spans());
        if (found.length > 0) return found;
        if (Date.now() > until) {
          const names = spans().map((s) => `${s.name} ${s.traceId}`);
          throw new Error(`no ${what} within ${timeoutMs} ms; received: ${names.join(", ") || "nothing"}`);
        }
        await new Promise((resolve) => setTimeout(resolve, 25));
      }
    },
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}
