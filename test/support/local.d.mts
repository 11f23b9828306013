// Types of local.mjs for the TypeScript tests.
export declare function findBinary(name: string, extraPaths?: readonly string[]): string;
export declare function requireBinaries(names: readonly string[]): void;
export declare function redisServerArgs(port: number): string[];
export declare function freePort(): Promise<number>;
export declare function waitFor(
  check: () => Promise<boolean>,
  timeoutMs: number,
  what: string,
  proc?: { alive(): boolean; output(): string },
): Promise<void>;
export declare function portOpen(port: number): Promise<boolean>;
export declare function prepareNginx(options: {
  prefix: string;
  template?: string;
  workers?: number;
  checkTimeout: string;
  checkPort: number;
  publicPort: number;
  upstreamPort: number;
  apiKeyHeader?: string;
  apiKeyForward?: boolean;
}): Promise<{ port: number; binary: string; args: string[]; errorLog(): string }>;
export declare function parseMonitorLine(line: string): { args: string[]; source: string } | undefined;
export declare function monitorRedis(
  url: string,
  onCommand: (args: string[], source: string) => void,
): Promise<{ close(): void }>;
