// Types of ensure-built.mjs for the TypeScript tests.
export declare const STAMP: string;
export declare function staleReason(root: string): string | undefined;
