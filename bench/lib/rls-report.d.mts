// Types of rls-report.mjs for the TypeScript tests: the rows as the bench's combine() makes them, as far
// as the rate limit service's report reads them.
export type RlsReportRow = {
  id: string;
  short: string;
  load: {
    rps: number;
    p50: number;
    p99: number;
    requests: number;
    errors: number;
    statuses: Record<string, number>;
    /** Measured slices: h2load leaves calls in flight at the end of each. */
    slices: number;
  };
  expected: number | string;
  serverCpuUsPerRequest: number;
  cpu?: { others: number };
  redis?: {
    requests: number;
    all: number;
    byCommand: Record<string, number>;
    cpuUsPerRequest: number;
    scriptCallsPerRequest: number;
  };
  grpc?: { streams: number; expectOutcome: string };
  outcomes?: { decisions: Record<string, number>; calls: Record<string, number> };
  rls?: { descriptors: number; algorithm: string; expectOverall?: number; floor?: boolean };
};
export declare const RLS_P99_MS: number;
export declare function commandsPerCall(row: RlsReportRow): number;
export declare function rlsTable(byId: Record<string, RlsReportRow>, options: { skipped?: string }): string[];
export declare function rlsTargets(
  byId: Record<string, RlsReportRow>,
): { target: string; figure: string; met: boolean }[];
