// Types of render.mjs for the TypeScript tests.
export type ConfigName = "http" | "grpc" | "ratelimit";
export type AddressKey = "check" | "grpc" | "public" | "upstream" | "listen" | "admin";
export type Address = { host: string; port: number; ipv6: boolean };
export declare const CONFIGS: Record<ConfigName, { file: string; clusters: Record<string, AddressKey> }>;
export declare const ADDRESSES: Record<AddressKey, { flag: string; env: string; fallback?: string }>;
export declare const DEFAULT_API_KEY_HEADER: string;
export declare function parseAddress(text: string): Address | undefined;
export declare function renderEnvoyConfig(
  name: ConfigName,
  addresses: Partial<Record<AddressKey, Address>>,
  apiKeyHeader?: string,
): string;
export declare function parseCli(
  args: readonly string[],
  env?: Record<string, string | undefined>,
): {
  help?: boolean;
  dir?: string;
  names?: ConfigName[];
  addresses?: Partial<Record<AddressKey, Address>>;
  apiKeyHeader?: string;
  problems: string[];
};
export declare function writeEnvoyConfigs(options: {
  dir: string;
  names: readonly ConfigName[];
  addresses: Partial<Record<AddressKey, Address>>;
  apiKeyHeader?: string;
}): string[];
