// Reads the Prometheus text exposition format into samples, so that tests can assert exact values.

export type Sample = { name: string; labels: Record<string, string>; value: number };

const SAMPLE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)(?: -?\d+)?$/;
const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(?:,|$)/y;

const unescapeLabel = (value: string): string =>
  value.replace(/\\(.)/g, (_, c: string) => (c === "n" ? "\n" : c));

function number(text: string): number {
  if (text === "+Inf") return Number.POSITIVE_INFINITY;
  if (text === "-Inf") return Number.NEGATIVE_INFINITY;
  // prom-client writes NaN as "Nan" (an event loop lag with no sample since the last scrape);
  // Prometheus reads NaN in any case, as Go's ParseFloat does.
  if (text.toLowerCase() === "nan") return Number.NaN;
  const value = Number(text);
  if (Number.isNaN(value)) throw new Error(`not a sample value: ${text}`);
  return value;
}

/** Every sample line of `text`; a line that is neither a comment nor a sample throws. */
export function parsePrometheus(text: string): Sample[] {
  const samples: Sample[] = [];
  for (const line of text.split("\n")) {
    if (line.trim() === "" || line.startsWith("#")) continue;
    const match = SAMPLE.exec(line);
    if (match === null) throw new Error(`not a Prometheus sample line: ${line}`);
    const labels: Record<string, string> = {};
    const body = match[2] ?? "";
    LABEL.lastIndex = 0;
    while (LABEL.lastIndex < body.length) {
      const label = LABEL.exec(body);
      if (label === null) throw new Error(`bad labels in: ${line}`);
      labels[label[1] as string] = unescapeLabel(label[2] as string);
    }
    samples.push({ name: match[1] as string, labels, value: number(match[3] as string) });
  }
  return samples;
}

/**
 * The samples named `name` as { "<value of labelNames[0]>|<value of labelNames[1]>|…": value }:
 * compare it with toEqual to assert that exactly these series exist, with exactly these values.
 */
export function series(samples: readonly Sample[], name: string, labelNames: readonly string[]) {
  const out: Record<string, number> = {};
  for (const sample of samples) {
    if (sample.name !== name) continue;
    const names = Object.keys(sample.labels).sort();
    if (names.join() !== [...labelNames].sort().join()) {
      throw new Error(`${name} has labels ${names.join()}, expected ${labelNames.join()}`);
    }
    out[labelNames.map((l) => sample.labels[l]).join("|")] = sample.value;
  }
  return out;
}

/** The one sample named `name` with exactly `labels`; undefined when there is none. */
export function sampleValue(
  samples: readonly Sample[],
  name: string,
  labels: Record<string, string> = {},
): number | undefined {
  const wanted = JSON.stringify(Object.entries(labels).sort());
  const found = samples.filter(
    (s) => s.name === name && JSON.stringify(Object.entries(s.labels).sort()) === wanted,
  );
  if (found.length > 1) throw new Error(`${name} ${wanted} appears ${found.length} times`);
  return found[0]?.value;
}
