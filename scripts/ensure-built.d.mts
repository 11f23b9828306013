// Types of ensure-built.mjs for the TypeScript tests.
export declare const STAMP: string;
export declare function staleReason(root: string): string | undefined;
export declare function ensureBuilt(root?: string): void;
