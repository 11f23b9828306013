// Types of tracing.mjs for the TypeScript tests: the rows as far as the tracing targets read them.
export type TracingReportRow = {
  id: string;
  short: string;
  load: { rps: number };
  serverCpuUsPerRequest: number;
};
export type Target = { target: string; figure: string; met: boolean };
/** Two rows measured in pairs of slices back to back (pairs.mjs), keyed "numerator/denominator". */
export type Paired = {
  numerator: string;
  denominator: string;
  seconds: number;
  ratios: number[];
  median: number;
  cpuMedian: number;
};
export declare function tracingTargets(
  byId: Record<string, TracingReportRow>,
  paired?: Record<string, Paired>,
): Target[];
