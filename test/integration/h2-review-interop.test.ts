// A review of tollgate's own HTTP/2 server against independent clients in unusual ways: h2load with
// many streams and tiny windows, grpc-js sending keepalive PINGs, node:http2 with metadata near the
// header list bound and a tiny window.
import { execFile } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import * as http2 from "node:http2";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import * as grpc from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { findBinary } from "../support/binaries.js";
import { grpcMessage } from "../support/h2-raw.js";
import { startTestServer, type TestServer } from "../support/h2-test-server.js";

let server: TestServer;
let url: string;

beforeAll(async () => {
  server = await startTestServer();
  url = `http://127.0.0.1:${server.port}`;
});

afterAll(async () => {
  await server?.close();
});

async function h2load(message: Buffer, args: string[]): Promise<string> {
  const dir = mkdtempSync(join(tmpdir(), "tollgate-h2load-"));
  const body = join(dir, "body");
  writeFileSync(body, grpcMessage(message));
  const { stdout } = await promisify(execFile)(findBinary("h2load"), [
    ...args,
    "-d",
    body,
    "-H",
    "content-type: application/grpc",
    "-H",
    "te: trailers",
    `${url}/t.T/Echo`,
  ]);
  return stdout;
}

describe("h2load", () => {
  it("completes 20000 calls over 4 connections of 100 streams", async () => {
    const stdout = await h2load(Buffer.from("load"), ["-n", "20000", "-c", "4", "-m", "100"]);
    expect(stdout).toMatch(/20000 succeeded, 0 failed, 0 errored/);
  }, 60_000);

  it("completes calls of 40 KB answers through 2^6-1 byte stream and connection windows", async () => {
    const stdout = await h2load(Buffer.alloc(40_000, 1), [
      "-n",
      "200",
      "-c",
      "2",
      "-m",
      "10",
      "-w",
      "6",
      "-W",
      "6",
    ]);
    expect(stdout).toMatch(/200 succeeded, 0 failed, 0 errored/);
  }, 60_000);
});

type Answer = { status: string | undefined; message: Buffer };

function call(
  session: http2.ClientHttp2Session,
  message: Buffer,
  headers: http2.OutgoingHttpHeaders = {},
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = session.request({
      ":method": "POST",
      ":path": "/t.T/Probe",
      "content-type": "application/grpc+proto",
      te: "trailers",
      ...headers,
    });
    const chunks: Buffer[] = [];
    let status: string | undefined;
    req.on("response", (h) => {
      status = h["grpc-status"] as string | undefined;
    });
    req.on("trailers", (t) => {
      status = t["grpc-status"] as string | undefined;
    });
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => resolve({ status, message: Buffer.concat(chunks).subarray(5) }));
    req.on("error", reject);
    req.end(grpcMessage(message));
  });
}

describe("node:http2's client", () => {
  it("gets metadata of 60 KiB back through a 7-byte window, and RESOURCE_EXHAUSTED past 64 KiB", async () => {
    const session = http2.connect(url, {
      settings: { initialWindowSize: 7, maxHeaderListSize: 1 << 20 },
      maxSendHeaderBlockLength: 1 << 20,
    });
    try {
      const big = "v".repeat(60 * 1024);
      const answer = await call(session, Buffer.from("m"), { "x-probe": big, "x-request-id": "r" });
      expect(answer.status).toBe("0");
      expect(answer.message.toString()).toBe(big);
      const over = await call(session, Buffer.from("m"), { "x-probe": "w".repeat(65 * 1024) });
      expect(over.status).toBe(String(grpc.status.RESOURCE_EXHAUSTED));
      const after = await call(session, Buffer.from("m"), { "x-probe": "after" });
      expect(after.message.toString()).toBe("after");
    } finally {
      session.destroy();
    }
  });

  it("serves 20 connections at once, 50 calls each", async () => {
    const sessions = Array.from({ length: 20 }, () => http2.connect(url));
    try {
      const answers = await Promise.all(
        sessions.flatMap((s, i) =>
          Array.from({ length: 50 }, (_, j) => call(s, Buffer.from("m"), { "x-probe": `${i}-${j}` })),
        ),
      );
      expect(answers.every((a, k) => a.message.toString() === `${Math.floor(k / 50)}-${k % 50}`)).toBe(true);
    } finally {
      for (const s of sessions) s.destroy();
    }
  });
});

describe("grpc-js", () => {
  const identity = (b: Buffer) => b;
  const Client = grpc.makeGenericClientConstructor(
    {
      Echo: {
        path: "/t.T/Echo",
        requestStream: false,
        responseStream: false,
        requestSerialize: identity,
        requestDeserialize: identity,
        responseSerialize: identity,
        responseDeserialize: identity,
      },
    },
    "T",
  );

  it("keeps a channel that PINGs every 50 ms (keepalive, without calls too) for 3 s and calls on it", async () => {
    const options = {
      "grpc.keepalive_time_ms": 50,
      "grpc.keepalive_timeout_ms": 1000,
      "grpc.keepalive_permit_without_calls": 1,
    };
    // biome-ignore lint/suspicious/noExplicitAny: a generic client's methods are untyped.
    const client = new Client(`127.0.0.1:${server.port}`, grpc.credentials.createInsecure(), options) as any;
    const echo = (text: string) =>
      new Promise<string>((resolve, reject) =>
        client.Echo(Buffer.from(text), (error: Error | null, value: Buffer) =>
          error ? reject(error) : resolve(value.toString()),
        ),
      );
    try {
      expect(await echo("before")).toBe("before");
      for (let i = 0; i < 30; i++) {
        await new Promise((resolve) => setTimeout(resolve, 100));
        expect(await echo(`during ${i}`)).toBe(`during ${i}`);
      }
    } finally {
      client.close();
    }
  });
});
