// gRPC calls by method and status, and those in flight: the label children are resolved once per
// label set, and count in plain numbers read when the metrics are (lean-counter.ts).
import type { LeanHistogramChild } from "./lean-histogram.js";
import type { Metrics } from "./metrics.js";

export function createRpcObserver(metrics: Pick<Metrics, "grpcCalls" | "grpcInFlight">) {
  const inFlight = new Map<string, { inc(): void; dec(): void }>();
  const calls = new Map<string, { inc(): void }>();
  const inFlightOf = (method: string) => {
    let child = inFlight.get(method);
    if (child === undefined) {
      child = metrics.grpcInFlight.labels({ method });
      inFlight.set(method, child);
    }
    return child;
  };
  return {
    started(method: string) {
      inFlightOf(method).inc();
    },
    finished(method: string, status: string) {
      inFlightOf(method).dec();
      const key = `${method}|${status}`;
      let child = calls.get(key);
      if (child === undefined) {
        child = metrics.grpcCalls.labels({ method, status });
        calls.set(key, child);
      }
      child.inc();
    },
  };
}

/**
 * Beyond this many label sets (a `detailed_metric` limit puts request values in its key path), new
 * ones are counted under the key `_other`, so that a stream of distinct values cannot grow the
 * metrics without bound.
 */
const MAX_RLS_SERIES = 10_000;

/** Rate limit service hits per domain, key path and result. */
export function createRlsObserver(metrics: Pick<Metrics, "rlsHits">) {
  const children = new Map<string, { inc(value?: number): void }>();
  return (domain: string, key: string, result: string, hits: number): void => {
    let id = `${domain}\n${key}\n${result}`;
    let child = children.get(id);
    if (child === undefined && children.size >= MAX_RLS_SERIES) {
      id = `${domain}\n_other\n${result}`;
      child = children.get(id);
    }
    if (child === undefined) {
      child = metrics.rlsHits.labels({
        domain,
        key: children.size >= MAX_RLS_SERIES ? "_other" : key,
        result,
      });
      children.set(id, child);
    }
    child.inc(hits);
  };
}

/**
 * `call` with the time of each call observed in `histogram`, the failed ones too (a store timeout
 * is what Envoy waits longest for). A call answered at once stays answered at once: no promise is
 * made for it.
 */
export function timed<Input, Answer>(
  histogram: LeanHistogramChild,
  call: (input: Input) => Answer | Promise<Answer>,
): (input: Input) => Answer | Promise<Answer> {
  const since = (started: number): number => (performance.now() - started) / 1000;
  return (input) => {
    const started = performance.now();
    let answer: Answer | Promise<Answer>;
    try {
      answer = call(input);
    } catch (error) {
      histogram.observe(since(started));
      throw error;
    }
    if (!(answer instanceof Promise)) {
      histogram.observe(since(started));
      return answer;
    }
    const observe = (): void => histogram.observe(since(started));
    return answer.then(
      (value) => {
        observe();
        return value;
      },
      (error: unknown) => {
        observe();
        throw error;
      },
    );
  };
}
