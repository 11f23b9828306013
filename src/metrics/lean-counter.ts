// Counters and gauges for the paths every proxied request waits on: a label set's child is a plain
// number, added to (or, for a gauge, copied into) the prom-client metric when it is read.
// prom-client's own inc and dec validate and hash the labels on every call.
import { Counter, Gauge, type LabelValues, type Registry } from "prom-client";

type Options<L extends string> = { name: string; help: string; labelNames: readonly L[]; registry: Registry };

export type LeanCounter<L extends string> = {
  /** A label set's counter, made once per label set and kept (label values must be bounded). */
  labels(labels: LabelValues<L>): { inc(value?: number): void };
};

export type LeanGauge<L extends string> = {
  /** A label set's gauge, made once per label set and kept (label values must be bounded). */
  labels(labels: LabelValues<L>): { inc(): void; dec(): void };
};

export function createLeanCounter<L extends string>(options: Options<L>): LeanCounter<L> {
  const pending: { labels: LabelValues<L>; count: number }[] = [];
  const counter = new Counter<L>({
    name: options.name,
    help: options.help,
    labelNames: options.labelNames,
    registers: [options.registry],
    collect() {
      for (const p of pending) {
        if (p.count === 0) continue;
        this.inc(p.labels, p.count);
        p.count = 0;
      }
    },
  });
  // A reset drops what was counted and not yet read, as prom-client's own counter would.
  const reset = counter.reset.bind(counter);
  counter.reset = () => {
    for (const p of pending) p.count = 0;
    reset();
  };
  return {
    labels(labels) {
      const entry = { labels, count: 0 };
      pending.push(entry);
      return {
        inc(value = 1) {
          entry.count += value;
        },
      };
    },
  };
}

export function createLeanGauge<L extends string>(options: Options<L>): LeanGauge<L> {
  const current: { labels: LabelValues<L>; value: number }[] = [];
  new Gauge<L>({
    name: options.name,
    help: options.help,
    labelNames: options.labelNames,
    registers: [options.registry],
    collect() {
      for (const c of current) this.set(c.labels, c.value);
    },
  });
  return {
    labels(labels) {
      const entry = { labels, value: 0 };
      current.push(entry);
      return {
        inc() {
          entry.value += 1;
        },
        dec() {
          entry.value -= 1;
        },
      };
    },
  };
}
