// The check listener's answers have a known length, so proxies keep their connections to it.
import { request } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { demoToken, type InProcess, startInProcess } from "../support/in-process.js";

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
function get(path: string, headers: Record<string, string>, agent: import("node:http").Agent): Promise<Raw> {
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
    const statuses = answers.map((a) => a.status);
    expect(statuses.slice(0, 4)).toEqual([200, 401, 200, 401]);
    expect(statuses.at(-1)).toBe(403);
    for (const answer of answers) {
      expect(answer.headers["transfer-encoding"]).toBeUndefined();
      expect(Number(answer.headers["content-length"])).toBe(Buffer.byteLength(answer.body));
    }
    // nginx reads no body from auth_request: denials for it carry the JSON in X-Authz-Body only.
    const limited = answers.at(-1) as Raw;
    expect(limited.body).toBe("");
    expect(JSON.parse(String(limited.headers["x-authz-body"]))).toMatchObject({
      error: "rate_limit_exceeded",
    });
    expect(new Set(answers.map((a) => a.socket)).size).toBe(1);
    agent.destroy();
  });
});
