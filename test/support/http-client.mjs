// The one HTTP client of the tests and the bench for well-formed requests, on node:http: keep-alive,
// a chosen loopback source address, every header value kept. On top of `send`: a JSON client bound to
// a base URL (the public and admin APIs), a login, and a readiness probe. Requests node refuses to
// send (CR/LF, control bytes, broken framing) go through raw-http.ts instead.
import { Agent, request } from "node:http";

const agent = new Agent({ keepAlive: true, maxSockets: Number.POSITIVE_INFINITY });

/** Closes the pooled connections; call from afterAll. */
export function closeClient() {
  agent.destroy();
}

/**
 * One request. `body`: a string or bytes go as they are (no content type unless `headers` give one),
 * any other object as JSON. Resolves with the status, every header value and the text of the body.
 */
export function send(url, options = {}) {
  const target = new URL(url);
  const headers = { ...options.headers };
  let body;
  if (typeof options.body === "string" || ArrayBuffer.isView(options.body)) body = options.body;
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
        const chunks = [];
        res.on("data", (chunk) => chunks.push(chunk));
        res.on("error", reject);
        res.on("end", () => {
          const all = {};
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
            json: () => JSON.parse(text),
          });
        });
      },
    );
    req.on("error", reject);
    req.end(body);
  });
}

const hasHeader = (headers, name) => Object.keys(headers).some((key) => key.toLowerCase() === name);

/**
 * A client of the API at `base`: `call(method, path, { token, json, body, headers })` sends a bearer
 * token and a JSON body when given, labels a string `body` text/plain unless `headers` say otherwise
 * (bytes go with no type), and answers the status, the headers (a Headers) and the body, parsed when
 * it is JSON.
 */
export function client(base) {
  return async (method, path, options = {}) => {
    const headers = { ...options.headers };
    if (options.token !== undefined) headers.authorization = `Bearer ${options.token}`;
    let body = options.body;
    if (options.json !== undefined) {
      body = JSON.stringify(options.json);
      headers["content-type"] ??= "application/json";
    } else if (typeof body === "string" && !hasHeader(headers, "content-type")) {
      headers["content-type"] = "text/plain;charset=UTF-8";
    }
    const reply = await send(`${base}${path}`, { method, headers, ...(body === undefined ? {} : { body }) });
    const all = new Headers();
    for (const [name, values] of Object.entries(reply.headers))
      for (const value of values) all.append(name, value);
    const isJson = /^application\/json\b/.test(all.get("content-type") ?? "");
    return { status: reply.status, headers: all, body: isJson ? reply.json() : reply.text };
  };
}

/** POST /auth/login on tollgate's public listener at `baseUrl`; the body when it answers 200, else fails. */
export async function login(baseUrl, username, password = "secret", headers = {}) {
  const reply = await send(`${baseUrl}/auth/login`, {
    method: "POST",
    headers,
    body: { username, password },
  });
  if (reply.status !== 200) throw new Error(`login of ${username} failed: ${reply.status} ${reply.text}`);
  return reply.json();
}

/** Whether a GET of `url` answers 2xx. */
export async function httpOk(url, headers = {}) {
  const { status } = await send(url, { headers });
  return status >= 200 && status < 300;
}
