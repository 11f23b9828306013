// Types of local.mjs for the TypeScript tests.
export declare function findBinary(name: string, extraPaths?: readonly string[]): string;
export declare function redisServerArgs(port: number): string[];
export declare function freePort(): Promise<number>;
export declare function waitFor(
  check: () => Promise<boolean>,
  timeoutMs: number,
  what: string,
  proc?: { alive(): boolean; output(): string },
): Promise<void>;
