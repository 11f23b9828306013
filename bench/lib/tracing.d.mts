// Types of tracing.mjs for the TypeScript tests: the rows as far as the tracing targets read them.
export type TracingReportRow = {
  id: string;
  short: string;
  load: { rps: number };
  serverCpuUsPerRequest: number;
};
export type Target = { target: string; figure: string; met: boolean };
export declare function tracingTargets(byId: Record<string, TracingReportRow>): Target[];
