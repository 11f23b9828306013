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

/** An answer of an API client: the body parsed when it is JSON, else its text. */
export type ApiReply<T> = { status: number; headers: Headers; body: T };

// The bodies the public and admin APIs answer.
export type ErrorBody = { error: string; message: string };

export type CallOptions = {
  token?: string;
  json?: unknown;
  /** A raw body, sent as it is: a string goes as text/plain unless `headers` say otherwise, bytes with no type. */
  body?: string | Uint8Array;
  headers?: Record<string, string>;
};

export type Client = <T = ErrorBody>(
  method: string,
  path: string,
  options?: CallOptions,
) => Promise<ApiReply<T>>;

export declare function client(base: string): Client;

export type LoginBody = {
  access_token: string;
  token_type: string;
  expires_in: number;
  session_id: string;
  user_id: string;
  tier: string;
};

export type SessionBody = {
  session_id: string;
  device_name: string;
  ip: string;
  user_agent: string;
  created_at: string;
  last_accessed: string;
  is_current?: boolean;
};
export type SessionsBody = { sessions: SessionBody[]; total: number };
export type MeBody = { user_id: string; username: string; tier: string; device: string; session_id: string };
export type LimitsBody = {
  user_id: string;
  tier: string;
  limits: Record<string, { limit: number; used: number; remaining: number; reset: number }>;
};

export declare function login(
  baseUrl: string,
  username: string,
  password?: string,
  headers?: Record<string, string>,
): Promise<LoginBody>;
export declare function httpOk(url: string, headers?: Record<string, string>): Promise<boolean>;
