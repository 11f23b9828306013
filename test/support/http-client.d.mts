// Types of http-client.mjs for the TypeScript tests.

export type Reply = {
  status: number;
  /** Header values by lower-case name; a header sent twice has two entries. */
  headers: Record<string, string[]>;
  text: string;
  /** The single value of a header; fails the test when it came more than once. */
  header(name: string): string | undefined;
  json<T = Record<string, unknown>>(): T;
};

export type SendOptions = {
  method?: string;
  headers?: Record<string, string | string[]>;
  /** A string or bytes are sent as they are; any other object as JSON. */
  body?: string | Uint8Array | object;
  /** Source address of the connection, e.g. 127.0.0.7: the client IP a proxy sees on loopback. */
  localAddress?: string;
};

export declare function closeClient(): void;
export declare function send(url: string, options?: SendOptions): Promise<Reply>;

export type LoginBody = {
  access_token: string;
  token_type: string;
  expires_in: number;
  session_id: string;
  user_id: string;
  tier: string;
};

export declare function login(
  baseUrl: string,
  username: string,
  password?: string,
  headers?: Record<string, string>,
): Promise<LoginBody>;
export declare function httpOk(url: string, headers?: Record<string, string>): Promise<boolean>;
