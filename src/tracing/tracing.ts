// Tracing as the rest of tollgate sees it: a server span around a request's work, store calls as its
// children, and the flush at exit. Off (OTEL_EXPORTER_OTLP_ENDPOINT unset), there is no Tracing at
// all: every caller holds `Tracing | undefined` and tests it once per request, so an untraced
// request makes no span object and carries no context.

export type SpanAttributes = Record<string, string | number | boolean>;

/** What the caller sent of its trace: W3C Trace Context's two headers. */
export type TraceHeaders = { traceparent: string | undefined; tracestate: string | undefined };

/** A recording span, as the work inside it may complete it. */
export type SpanHandle = {
  setAttributes(attributes: SpanAttributes): void;
  /** A name known only at the end (an HTTP route, once routed). */
  rename(name: string): void;
  /** Marks the span failed: a 5xx, an unexpected error. `message` must hold no secret. */
  fail(message: string): void;
};

export type Tracing = {
  /**
   * Runs `work` inside a server span named `name` that continues the caller's trace, and ends the
   * span when `work` settles. `work` gets undefined when the span is not sampled (nothing is
   * recorded; store calls then make no spans either). The store calls `work` makes before its
   * first await are the span's children (a check's, an RLS call's): no context is carried.
   */
  serve<T>(
    name: string,
    caller: TraceHeaders,
    attributes: SpanAttributes,
    work: (span: SpanHandle | undefined) => Promise<T>,
  ): Promise<T>;
  /** As `serve`, with every store call `work` makes, across its awaits, a child (an API request). */
  serveAcrossAwaits<T>(
    name: string,
    caller: TraceHeaders,
    attributes: SpanAttributes,
    work: (span: SpanHandle | undefined) => Promise<T>,
  ): Promise<T>;
  /**
   * `port` with every method a client span (`<name>.<method>`) when called by the work of a
   * sampled span, as its child; called elsewhere, as it is.
   */
  traced<T extends object>(port: T, name: string, attributes: SpanAttributes): T;
  /** Exports the spans still queued (bounded in time) and stops. */
  shutdown(): Promise<void>;
};
