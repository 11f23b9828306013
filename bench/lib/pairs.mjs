// The targets that compare two rows of one run, measured again in pairs of short slices back to back.
// The rows' own slices of two rows run seconds to minutes apart (every other row between them), and on
// a shared VM the machine's speed swings from 0.5 to 1.0 within seconds (the speed column of the CPU
// table): one row caught in a slow phase moves the ratio by more than the code under test does. Two
// slices back to back see the same machine; the pairs alternate their order (AB, BA, …), and the median
// of the pairs' ratios leaves out a pair that a swing split.
import { cpuFigures } from "./cpu.mjs";
import { summarizeLoad } from "./load.mjs";
import { measureSlice, serverCpuUs } from "./rows.mjs";

/** [numerator, denominator] row ids: the two rows of each ratio a target judges. */
export const PAIRS = [
  ["denied-cached-h2load", "allowed-h2load"],
  ["denied", "allowed"],
  ["allowed", "allowed-compare"],
];

const median = (values) => {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2;
};

/** One slice's checks/s and server CPU per request. */
function sliceFigures(spec, slice) {
  const load = summarizeLoad([slice.load]);
  return {
    rps: load.rps,
    cpuUs: serverCpuUs(spec, cpuFigures([slice.cpu]), slice.checks ?? load.requests),
    probeMs: slice.probeMs,
  };
}

/**
 * Each pair of PAIRS whose rows are both measured, `pairs` times: its two rows one slice each, back to
 * back. Keyed "numerator/denominator": every pair's figures, and the medians of their ratios.
 */
export async function measurePairs(specs, ctx, { pairs, duration, warmup }) {
  const byId = new Map(specs.map((spec) => [spec.id, spec]));
  const results = {};
  for (const [a, b] of PAIRS) {
    const [numerator, denominator] = [byId.get(a), byId.get(b)];
    if (numerator === undefined || denominator === undefined || pairs === 0) continue;
    const measured = [];
    for (let i = 0; i < pairs; i += 1) {
      const order = i % 2 === 0 ? [numerator, denominator] : [denominator, numerator];
      const figures = {};
      for (const spec of order) {
        process.stderr.write(`bench: pair ${i + 1} of ${pairs}, ${a} against ${b}: ${spec.short} …\n`);
        figures[spec.id] = sliceFigures(spec, await measureSlice(spec, ctx, { duration, warmup }));
      }
      measured.push({ numerator: figures[a], denominator: figures[b] });
    }
    const ratios = measured.map((pair) => pair.numerator.rps / pair.denominator.rps);
    results[`${a}/${b}`] = {
      numerator: a,
      denominator: b,
      seconds: duration,
      pairs: measured,
      ratios,
      median: median(ratios),
      // CPU per request, denominator over numerator: how much cheaper the numerator's work is.
      cpuMedian: median(measured.map((pair) => pair.denominator.cpuUs / pair.numerator.cpuUs)),
    };
  }
  return results;
}
