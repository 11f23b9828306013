// The check listener's answers have a known length, so proxies keep their connections to it.
import { request } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { demoToken, type InProcess, startInProcess } from "../support/in-process.js";
import { rawRequest } from "../support/raw-http.js";

let tollgate: InProcess;
let token = "";

beforeAll(async () => {
  tollgate = await startInProcess({ env: { LOG_LEVEL: "silent" } });
  token = await demoToken(tollgate.tollgate.auth, "alice");
});
afterAll(async () => {
  await tollgate.close();
});

type Raw = {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
  socket: unknown;
};

/** Sends requests over one kept-alive socket and reports which socket answered each. */
function get(path: string, headers: Record<string, string>, agent?: import("node:http").Agent): Promise<Raw> {
  return new Promise((resolve, reject) => {
    const req = request(`${tollgate.checkUrl}${path}`, { headers, agent }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (chunk: string) => {
        body += chunk;
      });
      res.on("end", () =>
        resolve({ status: res.statusCode ?? 0, headers: res.headers, body, socket: req.socket }),
      );
    });
    req.on("error", reject);
    req.end();
  });
}

describe("the check listener", () => {
  it("answers every kind of decision with Content-Length and keeps the connection", async () => {
    const { Agent } = await import("node:http");
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    const nginx = (uri: string, auth?: string) =>
      get(
        "/nginx/auth",
        { "x-original-method": "GET", "x-original-uri": uri, ...(auth ? { authorization: auth } : {}) },
        agent,
      );
    const answers = [
      await get("/ext_authz/api/products", { authorization: `Bearer ${token}` }, agent),
      await get("/ext_authz/api/products", {}, agent),
      await nginx("/api/products", `Bearer ${token}`),
      await nginx("/api/products"),
    ];
    for (let i = 0; i < 25; i += 1) answers.push(await nginx("/api/search", `Bearer ${token}`));
    const limited = answers.at(-1) as Raw;
    expect(limited.status).toBe(403);
    // Envoy's 429s carry their JSON body: each complete, and the connection still reused after it.
    const envoyDenials = [];
    for (let i = 0; i < 3; i += 1) {
      envoyDenials.push(await get("/ext_authz/api/search", { authorization: `Bearer ${token}` }, agent));
    }
    for (const denial of envoyDenials) {
      expect(denial.status).toBe(429);
      expect(JSON.parse(denial.body)).toMatchObject({ error: "rate_limit_exceeded", category: "search" });
    }
    const statuses = answers.map((a) => a.status);
    expect(statuses.slice(0, 4)).toEqual([200, 401, 200, 401]);
    answers.push(...envoyDenials);
    for (const answer of answers) {
      expect(answer.headers["transfer-encoding"]).toBeUndefined();
      expect(Number(answer.headers["content-length"])).toBe(Buffer.byteLength(answer.body));
    }
    // nginx reads no body from auth_request: denials for it carry the JSON in X-Authz-Body only.
    expect(limited.body).toBe("");
    expect(JSON.parse(String(limited.headers["x-authz-body"]))).toMatchObject({
      error: "rate_limit_exceeded",
    });
    expect(new Set(answers.map((a) => a.socket)).size).toBe(1);
    agent.destroy();
  });

  it("answers pipelined checks with bodies in order, each complete", async () => {
    const check = (path: string) => `GET /ext_authz${path} HTTP/1.1\r\nHost: t\r\n\r\n`;
    const last = `GET /ext_authz/api/orders HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n`;
    const reply = await rawRequest(tollgate.checkUrl, check("/api/products") + check("/api/search") + last);
    // Three 401s with their JSON bodies, one after another on the one connection.
    const answers = reply.raw.split(/(?=HTTP\/1\.1 )/);
    expect(answers).toHaveLength(3);
    for (const answer of answers) {
      const [head = "", body = ""] = answer.split("\r\n\r\n");
      expect(head).toMatch(/^HTTP\/1\.1 401 /);
      expect(Number(/content-length: (\d+)/i.exec(head)?.[1])).toBe(Buffer.byteLength(body));
      expect(JSON.parse(body)).toMatchObject({ error: "unauthorized" });
    }
  });

  it("answers a pipeline of decisions that take different paths in request order", async () => {
    // An allowed check waits on the store; a 401, a 400 and a cached 429 are decided at once and
    // their answers are held to the end of the event loop's turn: none may overtake another.
    const user = await tollgate.newUser("free");
    const login = await tollgate.loginOk(user.username, user.password);
    const bearer = `Authorization: Bearer ${login.access_token}\r\n`;
    const check = (path: string, auth = "") => `GET /ext_authz${path} HTTP/1.1\r\nHost: t\r\n${auth}\r\n`;
    // Spend the user's search window so that its next search is refused (from the denial cache, once known).
    let searches = 0;
    for (;;) {
      const answer = await get("/ext_authz/api/search", { authorization: `Bearer ${login.access_token}` });
      if (answer.status === 429) break;
      searches += 1;
      expect(searches).toBeLessThan(1000);
    }
    const expected: number[] = [];
    let pipeline = "";
    for (let i = 0; i < 8; i += 1) {
      pipeline += check("/api/products", bearer);
      pipeline += check("/api/products");
      pipeline += check("/api/search%5C", bearer);
      pipeline += check("/api/search", bearer);
      expected.push(200, 401, 400, 429);
    }
    pipeline += `GET /ext_authz/api/products HTTP/1.1\r\nHost: t\r\n${bearer}Connection: close\r\n\r\n`;
    expected.push(200);
    const reply = await rawRequest(tollgate.checkUrl, pipeline);
    const answers = reply.raw.split(/(?=HTTP\/1\.1 \d{3} )/);
    expect(answers.map((answer) => Number(answer.slice(9, 12)))).toEqual(expected);
    for (const answer of answers) {
      const [head = "", body = ""] = answer.split("\r\n\r\n");
      expect(Number(/content-length: (\d+)/i.exec(head)?.[1])).toBe(Buffer.byteLength(body));
    }
  });
});
