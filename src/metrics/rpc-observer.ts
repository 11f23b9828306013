// gRPC calls by method and status, and those in flight: the label children are resolved once per
// label set, and count in plain numbers read when the metrics are (lean-counter.ts).
import type { Metrics } from "./metrics.js";

export function createRpcObserver(metrics: Pick<Metrics, "grpcCalls" | "grpcInFlight">) {
  const inFlight = new Map<string, { inc(): void; dec(): void }>();
  /** method → status → child: found without building a string per call. */
  const calls = new Map<string, Map<string, { inc(): void }>>();
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
      let statuses = calls.get(method);
      if (statuses === undefined) {
        statuses = new Map();
        calls.set(method, statuses);
      }
      let child = statuses.get(status);
      if (child === undefined) {
        child = metrics.grpcCalls.labels({ method, status });
        statuses.set(status, child);
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
  type Child = { inc(value?: number): void };
  /** domain → key → result → child: found without building a string per descriptor. */
  const children = new Map<string, Map<string, Map<string, Child>>>();
  let size = 0;
  const at = (domain: string, key: string): Map<string, Child> => {
    let keys = children.get(domain);
    if (keys === undefined) {
      keys = new Map();
      children.set(domain, keys);
    }
    let results = keys.get(key);
    if (results === undefined) {
      results = new Map();
      keys.set(key, results);
    }
    return results;
  };
  const childOf = (domain: string, key: string, result: string): Child => {
    const own = size >= MAX_RLS_SERIES ? "_other" : key;
    const results = at(domain, own);
    let child = results.get(result);
    if (child === undefined) {
      child = metrics.rlsHits.labels({ domain, key: own, result });
      results.set(result, child);
      size += 1;
    }
    return child;
  };
  return (domain: string, key: string, result: string, hits: number): void => {
    const child = children.get(domain)?.get(key)?.get(result) ?? childOf(domain, key, result);
    child.inc(hits);
  };
}
