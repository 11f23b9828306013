// Property-based fuzzing of the gRPC listener: random bytes as a message, and random CheckRequests
// (methods, targets, headers, sources), on one HTTP/2 connection. Never an INTERNAL status, never a
// hung call, every Check answer a CheckResponse that allows or denies with an HTTP status, and the
// connection still serves a good call afterwards.
import * as http2 from "node:http2";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { messages } from "../../src/frontends/envoy-grpc/protos.js";
import { checkRequest } from "../support/grpc-client.js";
import { demoToken, type InProcess, startInProcess } from "../support/in-process.js";

const CHECK = "/envoy.service.auth.v3.Authorization/Check";
const OK = 0;
const INTERNAL = 13;

let tollgate: InProcess;
let session: http2.ClientHttp2Session;
let validToken = "";

beforeAll(async () => {
  tollgate = await startInProcess();
  validToken = await demoToken(tollgate.tollgate.auth, "alice");
  session = http2.connect(tollgate.grpcUrl);
});

afterAll(async () => {
  session?.close();
  await tollgate?.close();
});

type Answer = { grpcStatus: number; body: Buffer };

function call(body: Buffer): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const stream = session.request({
      ":method": "POST",
      ":path": CHECK,
      "content-type": "application/grpc",
      te: "trailers",
    });
    let headers: http2.IncomingHttpHeaders = {};
    let trailers: http2.IncomingHttpHeaders = {};
    const chunks: Buffer[] = [];
    const timer = setTimeout(() => reject(new Error("the call hung")), 10_000);
    stream.on("response", (h) => {
      headers = h;
    });
    stream.on("trailers", (t) => {
      trailers = t;
    });
    stream.on("data", (chunk: Buffer) => chunks.push(chunk));
    stream.on("error", reject);
    stream.on("end", () => {
      clearTimeout(timer);
      resolve({
        grpcStatus: Number(trailers["grpc-status"] ?? headers["grpc-status"]),
        body: Buffer.concat(chunks),
      });
    });
    stream.end(body);
  });
}

const framed = (message: Uint8Array): Buffer => {
  const prefix = Buffer.alloc(5);
  prefix.writeUInt32BE(message.length, 1);
  return Buffer.concat([prefix, Buffer.from(message)]);
};

/** A CheckResponse that allows (status OK, ok_response) or denies with an HTTP status. */
function expectCheckResponse(answer: Answer): void {
  expect(answer.grpcStatus).toBe(OK);
  const decoded = messages.CheckResponse.decode(answer.body.subarray(5)) as {
    status?: { code?: number } | null;
    ok_response?: object | null;
    denied_response?: { status?: { code?: number } | null } | null;
  };
  const code = decoded.status?.code ?? 0;
  if (code === OK) expect(decoded.ok_response).toBeTruthy();
  else expect([400, 401, 414, 429, 503]).toContain(decoded.denied_response?.status?.code);
}

const text = fc.string({ unit: "binary", maxLength: 60 });
const headerName = fc.stringMatching(/^[a-z][a-z0-9-]{0,20}$/);

describe("the gRPC listener under random input", () => {
  it("never answers INTERNAL or hangs on random message bytes", async () => {
    await fc.assert(
      fc.asyncProperty(fc.uint8Array({ maxLength: 300 }), async (bytes) => {
        const answer = await call(framed(bytes));
        expect(answer.grpcStatus).not.toBe(INTERNAL);
        if (answer.grpcStatus === OK) expectCheckResponse(answer);
      }),
      { numRuns: 300 },
    );
  });

  it("answers every random CheckRequest with a CheckResponse that allows or denies", async () => {
    const requests = fc.record({
      method: fc.oneof(fc.constantFrom("GET", "POST", "DELETE", "OPTIONS"), text),
      path: fc.oneof(
        fc.constantFrom("/api/products", "/api/search?q=x", "/auth/login", "/health", "/api/%2e%2e/x", "*"),
        text.map((t) => `/${t}`),
        text,
      ),
      headers: fc.dictionary(headerName, text, { maxKeys: 6 }),
      authorization: fc.oneof(
        fc.constant(undefined),
        fc.constant("valid"),
        text.map((t) => `Bearer ${t}`),
        text,
      ),
      source: fc.oneof(fc.constant(undefined), fc.ipV4(), fc.ipV6(), text),
    });
    await fc.assert(
      fc.asyncProperty(requests, async (r) => {
        const headers = { ...r.headers };
        if (r.authorization !== undefined) {
          headers.authorization = r.authorization === "valid" ? `Bearer ${validToken}` : r.authorization;
        }
        const message = checkRequest({
          method: r.method,
          path: r.path,
          headers,
          ...(r.source === undefined ? {} : { source: r.source }),
        });
        const answer = await call(framed(messages.CheckRequest.encode(message).finish()));
        if (r.method === "" || r.path === "") {
          expect(answer.grpcStatus).toBe(3);
          return;
        }
        expectCheckResponse(answer);
      }),
      { numRuns: 300 },
    );
  });

  it("still serves a good call on the same connection afterwards", async () => {
    const answer = await call(
      framed(
        messages.CheckRequest.encode(
          checkRequest({ method: "POST", path: "/auth/login", source: "192.0.2.44" }),
        ).finish(),
      ),
    );
    expectCheckResponse(answer);
  });
});
