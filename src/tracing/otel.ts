// Tracing on the OpenTelemetry SDK: spans batched and exported over OTLP/HTTP, sampled as the
// settings say, continuing the caller's W3C traceparent. The SDK's packages are imported here, on
// first use, and only when an endpoint is set: a tollgate without tracing never loads them (the
// bundle keeps them outside, scripts/bundle.mjs).
import { AsyncLocalStorage } from "node:async_hooks";
import type { Span } from "@opentelemetry/api";
import type { Sampler } from "@opentelemetry/sdk-trace-base";
import { ATTR_SERVICE_NAME } from "@opentelemetry/semantic-conventions";
import type { TracingSettings } from "../config/tracing-settings.js";
import type { Logger } from "../process/logger.js";
import { createThrottledLog } from "../process/throttled-log.js";
import type { SpanAttributes, SpanHandle, TraceHeaders, Tracing } from "./tracing.js";

/** How long a stop waits for the last spans to be exported. */
const SHUTDOWN_MS = 2_000;

async function loadSdk() {
  const [api, core, base, resources, exporterHttp, exporterProto] = await Promise.all([
    import("@opentelemetry/api"),
    import("@opentelemetry/core"),
    import("@opentelemetry/sdk-trace-base"),
    import("@opentelemetry/resources"),
    import("@opentelemetry/exporter-trace-otlp-http"),
    import("@opentelemetry/exporter-trace-otlp-proto"),
  ]);
  return { api, core, base, resources, exporterHttp, exporterProto };
}
type Sdk = Awaited<ReturnType<typeof loadSdk>>;

/** OTEL_TRACES_SAMPLER as the specification defines each value. */
function samplerOf(sdk: Sdk, settings: TracingSettings): Sampler {
  const { AlwaysOnSampler, AlwaysOffSampler, ParentBasedSampler, TraceIdRatioBasedSampler } = sdk.base;
  switch (settings.sampler) {
    case "always_on":
      return new AlwaysOnSampler();
    case "always_off":
      return new AlwaysOffSampler();
    case "traceidratio":
      return new TraceIdRatioBasedSampler(settings.ratio);
    case "parentbased_always_on":
      return new ParentBasedSampler({ root: new AlwaysOnSampler() });
    case "parentbased_always_off":
      return new ParentBasedSampler({ root: new AlwaysOffSampler() });
    case "parentbased_traceidratio":
      return new ParentBasedSampler({ root: new TraceIdRatioBasedSampler(settings.ratio) });
  }
}

function handleOf(sdk: Sdk, span: Span): SpanHandle {
  return {
    setAttributes: (attributes) => span.setAttributes(attributes),
    rename: (name) => span.updateName(name),
    fail: (message) => span.setStatus({ code: sdk.api.SpanStatusCode.ERROR, message }),
  };
}

/** Tracing per `settings`; export failures are logged at most once a minute. */
export async function createOtelTracing(settings: TracingSettings, logger: Logger): Promise<Tracing> {
  const sdk = await loadSdk();
  const { api, core, base, resources } = sdk;
  const logExportFailure = createThrottledLog({
    logger,
    level: "warn",
    event: "trace_export_failed",
    message: "spans could not be exported (OTEL_EXPORTER_OTLP_ENDPOINT)",
    periodMs: 60_000,
  });
  // The SDK reports a failed export here (and only here): never the headers it sent.
  core.setGlobalErrorHandler((error) => {
    logExportFailure("export", { err: error instanceof Error ? error.message : String(error) });
  });
  const { OTLPTraceExporter } = settings.protocol === "http/json" ? sdk.exporterHttp : sdk.exporterProto;
  const exporter = new OTLPTraceExporter({ url: settings.url, headers: settings.headers });
  const provider = new base.BasicTracerProvider({
    // A backstop for any attribute a caller's text reaches.
    spanLimits: { attributeValueLengthLimit: 256 },
    resource: resources.defaultResource().merge(
      resources.resourceFromAttributes({
        ...settings.resourceAttributes,
        [ATTR_SERVICE_NAME]: settings.serviceName,
      }),
    ),
    sampler: samplerOf(sdk, settings),
    spanProcessors: [new base.BatchSpanProcessor(exporter)],
  });
  const tracer = provider.getTracer("tollgate");
  const propagator = new core.W3CTraceContextPropagator();
  /**
   * The sampled span of a check or RLS call, while its work starts: their store call is made before
   * their first await (src/check/checker.ts, src/frontends/envoy-grpc/rls.ts), so a variable set
   * around that synchronous start finds it, and no context is carried through the process.
   */
  let starting: Span | undefined;
  /**
   * The sampled span of an API request, across its awaits. AsyncLocalStorage installs promise hooks
   * for the whole process on Node 20 (about 12 µs more per check measured on the bench's machine),
   * so it is enabled only while such a request is in flight, and disabled after the last one.
   */
  const carried = new AsyncLocalStorage<Span>();
  let carrying = 0;

  const end = (span: Span, failure: unknown) => {
    if (failure !== undefined) {
      span.setStatus({ code: api.SpanStatusCode.ERROR, message: (failure as Error)?.name ?? "error" });
    }
    span.end();
  };

  /** Ends `span` when `done` settles, as `done` settles. */
  const endWith = <T>(span: Span, done: Promise<T>): Promise<T> =>
    done.then(
      (value) => {
        end(span, undefined);
        return value;
      },
      (error: unknown) => {
        end(span, error ?? "error");
        throw error;
      },
    );

  /** The server span continuing `caller`'s trace, when it is sampled. */
  const start = (name: string, caller: TraceHeaders, attributes: SpanAttributes): Span | undefined => {
    const parent = propagator.extract(api.ROOT_CONTEXT, caller, api.defaultTextMapGetter);
    const span = tracer.startSpan(name, { kind: api.SpanKind.SERVER, attributes }, parent);
    return span.isRecording() ? span : undefined;
  };

  const serve: Tracing["serve"] = (name, caller, attributes, work) => {
    const span = start(name, caller, attributes);
    if (span === undefined) return work(undefined);
    const outer = starting;
    starting = span;
    let done: ReturnType<typeof work>;
    try {
      done = work(handleOf(sdk, span));
    } finally {
      starting = outer;
    }
    return endWith(span, done);
  };

  const serveAcrossAwaits: Tracing["serveAcrossAwaits"] = (name, caller, attributes, work) => {
    const span = start(name, caller, attributes);
    if (span === undefined) return work(undefined);
    carrying += 1;
    const done = endWith(
      span,
      carried.run(span, () => work(handleOf(sdk, span))),
    );
    const release = () => {
      carrying -= 1;
      if (carrying === 0) carried.disable();
    };
    done.then(release, release);
    return done;
  };

  const call = (span: Span, run: () => unknown): unknown => {
    let result: unknown;
    try {
      result = run();
    } catch (error) {
      end(span, error ?? "error");
      throw error;
    }
    if (!(result instanceof Promise)) {
      end(span, undefined);
      return result;
    }
    return result.then(
      (value: unknown) => {
        end(span, undefined);
        return value;
      },
      (error: unknown) => {
        end(span, error ?? "error");
        throw error;
      },
    );
  };

  const traced: Tracing["traced"] = (port, name, attributes) => {
    const out: Record<string, unknown> = {};
    for (const [method, value] of Object.entries(port)) {
      if (typeof value !== "function") {
        out[method] = value;
        continue;
      }
      const fn = value as (...args: unknown[]) => unknown;
      const spanName = `${name}.${method}`;
      out[method] = (...args: unknown[]) => {
        const parent = starting ?? (carrying > 0 ? carried.getStore() : undefined);
        if (parent === undefined) return fn.apply(port, args);
        const span = tracer.startSpan(
          spanName,
          { kind: api.SpanKind.CLIENT, attributes },
          api.trace.setSpan(api.ROOT_CONTEXT, parent),
        );
        return call(span, () => fn.apply(port, args));
      };
    }
    return out as typeof port;
  };

  const shutdown = () =>
    Promise.race([
      provider.shutdown().catch(() => undefined),
      new Promise<void>((resolve) => setTimeout(resolve, SHUTDOWN_MS).unref()),
    ]);

  return { serve, serveAcrossAwaits, traced, shutdown };
}
