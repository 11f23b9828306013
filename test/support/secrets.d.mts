// Types of secrets.mjs for the TypeScript tests.
export declare const JWT_SECRET: string;
export declare const ADMIN_TOKEN: string;
export declare const METRICS_TOKEN: string;
