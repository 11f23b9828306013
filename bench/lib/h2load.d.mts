// Types of h2load.mjs for the TypeScript tests.
export declare const GRPC_CONNECTIONS: number;
export declare function h2loadBinary(): { path: string } | { missing: string };
export declare function parseH2loadSummary(stdout: string): {
  seconds: number;
  failed: number;
  errored: number;
  timeouts: number;
};
export declare function parseH2loadLog(text: string): {
  latencies: Float64Array;
  statuses: Record<string, number>;
  unanswered: number;
};
