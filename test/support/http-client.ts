// A test HTTP client on node:http: keep-alive, a chosen loopback source address, every header value kept.
import { Agent, request } from "node:http";

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
  /** An object is sent as JSON. */
  body?: string | object;
  /** Source address of the connection, e.g. 127.0.0.7: the client IP a proxy sees on loopback. */
  localAddress?: string;
};

const agent = new Agent({ keepAlive: true, maxSockets: Number.POSITIVE_INFINITY });

/** Closes the pooled connections; call from afterAll. */
export function closeClient(): void {
  agent.destroy();
}

export function send(url: string, options: SendOptions = {}): Promise<Reply> {
  const target = new URL(url);
  const headers: Record<string, string | string[]> = { ...options.headers };
  let body: string | undefined;
  if (typeof options.body === "string") body = options.body;
  else if (options.body !== undefined) {
    body = JSON.stringify(options.body);
    headers["content-type"] ??= "application/json";
  }
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: target.hostname,
        port: target.port,
        path: `${target.pathname}${target.search}`,
        method: options.method ?? "GET",
        headers,
        agent,
        ...(options.localAddress === undefined ? {} : { localAddress: options.localAddress }),
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (chunk: Buffer) => chunks.push(chunk));
        res.on("error", reject);
        res.on("end", () => {
          const all: Record<string, string[]> = {};
          for (const [name, values] of Object.entries(res.headersDistinct)) all[name] = values ?? [];
          const text = Buffer.concat(chunks).toString("utf8");
          resolve({
            status: res.statusCode ?? 0,
            headers: all,
            text,
            header(name) {
              const values = all[name.toLowerCase()];
              if (values !== undefined && values.length > 1) {
                throw new Error(`${name} came ${values.length} times: ${values.join(" | ")}`);
              }
              return values?.[0];
            },
            json: <T>() => JSON.parse(text) as T,
          });
        });
      },
    );
    req.on("error", reject);
    req.end(body);
  });
}
