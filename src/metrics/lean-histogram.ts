// A histogram with one label, for the check path: an observation is a bucket search and two additions.
// prom-client's own child observe validates and hashes its labels on every call, which on a cached
// denial cost more than the rest of the metrics together. This one is read through the same registry,
// in the same shape (the _bucket, _sum and _count series, summed over workers).
import type { Metric, Registry } from "prom-client";

export type LeanHistogramChild = { observe(value: number): void };

export type LeanHistogram = {
  /** The series of one label value, made once and kept (label values must be bounded). */
  labels(value: string): LeanHistogramChild;
};

type Series = { value: string; counts: Float64Array; sum: number; count: number };
type Sample = { value: number; labels: Record<string, string | number>; metricName: string };

export function createLeanHistogram(options: {
  name: string;
  help: string;
  labelName: string;
  buckets: readonly number[];
  registry: Registry;
}): LeanHistogram {
  const { name, help, labelName, registry } = options;
  const bounds = [...options.buckets].sort((a, b) => a - b);
  const series = new Map<string, Series>();

  const get = () => {
    const values: Sample[] = [];
    for (const s of series.values()) {
      let cumulative = 0;
      for (let i = 0; i < bounds.length; i += 1) {
        cumulative += s.counts[i] ?? 0;
        values.push({
          value: cumulative,
          labels: { le: bounds[i] as number, [labelName]: s.value },
          metricName: `${name}_bucket`,
        });
      }
      values.push(
        { value: s.count, labels: { le: "+Inf", [labelName]: s.value }, metricName: `${name}_bucket` },
        { value: s.sum, labels: { [labelName]: s.value }, metricName: `${name}_sum` },
        { value: s.count, labels: { [labelName]: s.value }, metricName: `${name}_count` },
      );
    }
    return { name, help, type: "histogram", values, aggregator: "sum" };
  };
  // The registry reads a metric through name, help, type, get() and reset(); nothing else is used.
  // reset() zeroes the series in place: the children handed out keep pointing at them.
  const reset = (): void => {
    for (const s of series.values()) {
      s.counts.fill(0);
      s.sum = 0;
      s.count = 0;
    }
  };
  const metric = { name, help, type: "histogram", aggregator: "sum", get, reset };
  registry.registerMetric(metric as unknown as Metric);

  return {
    labels(value) {
      let s = series.get(value);
      if (s === undefined) {
        s = { value, counts: new Float64Array(bounds.length), sum: 0, count: 0 };
        series.set(value, s);
      }
      const own = s;
      return {
        observe(observed) {
          if (!Number.isFinite(observed)) return;
          own.sum += observed;
          own.count += 1;
          for (let i = 0; i < bounds.length; i += 1) {
            if (observed <= (bounds[i] as number)) {
              (own.counts as Float64Array)[i] = (own.counts[i] ?? 0) + 1;
              return;
            }
          }
        },
      };
    },
  };
}
