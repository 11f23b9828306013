// gRPC calls by method and status, and those in flight: the label children are resolved once per
// label set, as the check metrics are (prom-client validates and hashes labels on every call).
import type { Metrics } from "./metrics.js";

export function createRpcObserver(metrics: Pick<Metrics, "grpcCalls" | "grpcInFlight">) {
  const inFlight = new Map<string, { inc(): void; dec(): void }>();
  const calls = new Map<string, { inc(): void }>();
  const inFlightOf = (method: string) => {
    let child = inFlight.get(method);
    if (child === undefined) {
      child = metrics.grpcInFlight.labels(method);
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
        child = metrics.grpcCalls.labels(method, status);
        calls.set(key, child);
      }
      child.inc();
    },
  };
}
