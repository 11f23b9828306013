// tollgate's own HTTP/2 server against independent implementations: node:http2's client (nghttp2),
// @grpc/grpc-js, and h2load (nghttp2's load generator): unary and server-streaming calls, every byte
// value through nghttp2's Huffman encoder, many streams at once, a client's tiny window, resets,
// the drain's GOAWAY, TLS chosen by ALPN, and random bytes that never take the process down.
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import * as http2 from "node:http2";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as tls from "node:tls";
import { promisify } from "node:util";
import * as grpc from "@grpc/grpc-js";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { findBinary } from "../support/binaries.js";
import { grpcMessage, PREFACE, RawClient, settings } from "../support/h2-raw.js";
import { startTestServer, type TestServer } from "../support/h2-test-server.js";
import { selfSignedCert } from "../support/self-signed.js";

let server: TestServer;
let url: string;

beforeAll(async () => {
  server = await startTestServer();
  url = `http://127.0.0.1:${server.port}`;
});

afterAll(async () => {
  await server?.close();
});

type Answer = { status: string | undefined; message: Buffer; headers: http2.IncomingHttpHeaders };

function call(
  session: http2.ClientHttp2Session,
  path: string,
  message: Buffer,
  headers: http2.OutgoingHttpHeaders = {},
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = session.request({
      ":method": "POST",
      ":path": path,
      "content-type": "application/grpc",
      te: "trailers",
      ...headers,
    });
    const chunks: Buffer[] = [];
    let head: http2.IncomingHttpHeaders = {};
    let status: string | undefined;
    req.on("response", (h) => {
      head = h;
      status = h["grpc-status"] as string | undefined;
    });
    req.on("trailers", (t) => {
      status = t["grpc-status"] as string | undefined;
    });
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => resolve({ status, message: Buffer.concat(chunks).subarray(5), headers: head }));
    req.on("error", reject);
    req.end(grpcMessage(message));
  });
}

describe("node:http2's client (nghttp2)", () => {
  it("sends every byte value 1-255 Huffman-coded in a header, and the server decodes each as sent", async () => {
    const session = http2.connect(url);
    try {
      // Among 32 'a's (5 bits each), even a 30-bit symbol makes the Huffman form the shorter one, so
      // nghttp2 codes each value with Huffman, and indexes it (the dynamic table fills and evicts).
      // Byte 0 cannot be sent: node's client ends a header at NUL (the unit test decodes it). CR and
      // LF make a request malformed (RFC 9113 section 8.2.1): the stream is reset.
      for (let byte = 1; byte < 256; byte++) {
        if (byte === 10 || byte === 13) {
          const value = `a${String.fromCharCode(byte)}a`;
          await expect(call(session, "/t.T/Probe", Buffer.alloc(0), { "x-probe": value })).rejects.toThrow();
          continue;
        }
        const value = `${"a".repeat(16)}${String.fromCharCode(byte)}${"a".repeat(16)}`;
        const answer = await call(session, "/t.T/Probe", Buffer.alloc(0), { "x-probe": value });
        expect(answer.status).toBe("0");
        expect(answer.message.toString("latin1"), `byte ${byte}`).toBe(value);
      }
      // Values reused from the dynamic table, mixed and repeated.
      const mixed = Array.from({ length: 256 }, (_, i) =>
        String.fromCharCode(i === 0 || i === 10 || i === 13 ? 97 : i),
      ).join("");
      for (let i = 0; i < 3; i++) {
        expect(
          (await call(session, "/t.T/Probe", Buffer.alloc(0), { "x-probe": mixed })).message.toString(
            "latin1",
          ),
        ).toBe(mixed);
      }
    } finally {
      session.close();
    }
  });

  it("answers 500 calls at once on one connection", async () => {
    const session = http2.connect(url);
    try {
      const answers = await Promise.all(
        Array.from({ length: 500 }, (_, i) => call(session, "/t.T/Echo", Buffer.from(`call ${i}`))),
      );
      answers.forEach((answer, i) => {
        expect(answer.status).toBe("0");
        expect(answer.message.toString()).toBe(`call ${i}`);
      });
    } finally {
      session.close();
    }
  });

  it("takes a 3 MB request in many DATA frames, and answers a client whose window is 16 bytes", async () => {
    const big = http2.connect(url);
    const tiny = http2.connect(url, { settings: { initialWindowSize: 16 } });
    try {
      const message = Buffer.alloc(3_000_000, 9);
      const answer = await call(big, "/t.T/Echo", message);
      expect(answer.status).toBe("0");
      expect(answer.message.equals(message)).toBe(true);
      const small = await call(tiny, "/t.T/Echo", Buffer.from("a message longer than sixteen bytes"));
      expect(small.message.toString()).toBe("a message longer than sixteen bytes");
    } finally {
      big.close();
      tiny.close();
    }
  });

  it("counts a call its client resets as CANCELLED, and the connection serves on", async () => {
    const session = http2.connect(url);
    try {
      const req = session.request({
        ":method": "POST",
        ":path": "/t.T/Hold",
        "content-type": "application/grpc",
      });
      req.on("error", () => undefined);
      req.end(grpcMessage(Buffer.from("held")));
      await expect.poll(() => server.held()).toBeGreaterThan(0);
      const cancelled = server.finished.filter((s) => s === "CANCELLED").length;
      req.close(http2.constants.NGHTTP2_CANCEL);
      await expect.poll(() => server.finished.filter((s) => s === "CANCELLED").length).toBe(cancelled + 1);
      server.release();
      expect((await call(session, "/t.T/Echo", Buffer.from("after"))).status).toBe("0");
    } finally {
      session.close();
    }
  });

  it("answers 405 with Allow: POST to a GET and 415 to a POST that is not gRPC, UNIMPLEMENTED to an unknown method", async () => {
    const session = http2.connect(url);
    try {
      const status = (headers: http2.OutgoingHttpHeaders) =>
        new Promise<http2.IncomingHttpHeaders>((resolve, reject) => {
          const req = session.request(headers);
          req.on("response", resolve);
          req.on("error", reject);
          req.end();
        });
      for (const method of ["GET", "PUT", "DELETE"]) {
        const refused = await status({ ":method": method, ":path": "/", "content-type": "application/grpc" });
        expect(refused[":status"]).toBe(405);
        expect(refused.allow).toBe("POST");
      }
      const notGrpc = await status({ ":method": "POST", ":path": "/", "content-type": "text/plain" });
      expect(notGrpc[":status"]).toBe(415);
      expect(notGrpc.allow).toBeUndefined();
      expect((await call(session, "/t.T/Nope", Buffer.alloc(0))).status).toBe("12");
    } finally {
      session.close();
    }
  });
});

describe("@grpc/grpc-js", () => {
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
      Watch: {
        path: "/t.T/Watch",
        requestStream: false,
        responseStream: true,
        requestSerialize: identity,
        requestDeserialize: identity,
        responseSerialize: identity,
        responseDeserialize: identity,
      },
    },
    "T",
  );

  it("makes unary calls and reads a server stream until it cancels it", async () => {
    // biome-ignore lint/suspicious/noExplicitAny: a generic client's methods are untyped.
    const client = new Client(`127.0.0.1:${server.port}`, grpc.credentials.createInsecure()) as any;
    try {
      for (let i = 0; i < 20; i++) {
        const answer = await new Promise<Buffer>((resolve, reject) =>
          client.Echo(Buffer.from(`grpc-js ${i}`), (error: Error | null, value: Buffer) =>
            error ? reject(error) : resolve(value),
          ),
        );
        expect(answer.toString()).toBe(`grpc-js ${i}`);
      }
      const stream = client.Watch(Buffer.from("tick"));
      const got: string[] = [];
      await new Promise<void>((resolve) => {
        stream.on("data", (b: Buffer) => {
          got.push(b.toString());
          if (got.length === 3) resolve();
        });
      });
      stream.on("error", () => undefined);
      stream.cancel();
      expect(got).toEqual(["tick", "tick", "tick"]);
      await expect.poll(() => server.watches.size).toBe(0);
    } finally {
      client.close();
    }
  });

  it("sees its calls in flight answered through the drain's GOAWAY, and its server stream ended OK", async () => {
    const draining = await startTestServer();
    // biome-ignore lint/suspicious/noExplicitAny: a generic client's methods are untyped.
    const client = new Client(`127.0.0.1:${draining.port}`, grpc.credentials.createInsecure()) as any;
    const session = http2.connect(`http://127.0.0.1:${draining.port}`);
    try {
      const stream = client.Watch(Buffer.from("w"));
      const streamEnd = new Promise<number>((resolve) =>
        stream.on("status", (s: { code: number }) => resolve(s.code)),
      );
      stream.on("data", () => undefined);
      const held = [
        call(session, "/t.T/Hold", Buffer.from("one")),
        call(session, "/t.T/Hold", Buffer.from("two")),
      ];
      await expect.poll(() => draining.held()).toBe(2);
      const goaway = new Promise<number>((resolve) => session.once("goaway", (code) => resolve(code)));
      const drained = draining.drain();
      expect(await goaway).toBe(0);
      expect(await streamEnd).toBe(grpc.status.OK);
      draining.release();
      const answers = await Promise.all(held);
      expect(answers.map((a) => a.message.toString())).toEqual(["one", "two"]);
      await drained;
    } finally {
      session.destroy();
      client.close();
      await draining.close();
    }
  });
});

describe("h2load (nghttp2)", () => {
  it("completes 5000 calls over 2 connections of 32 streams, every one answered 200 with grpc-status 0", async () => {
    const dir = mkdtempSync(join(tmpdir(), "tollgate-h2load-"));
    const body = join(dir, "body");
    writeFileSync(body, grpcMessage(Buffer.from("load")));
    const { stdout } = await promisify(execFile)(findBinary("h2load"), [
      "-n",
      "5000",
      "-c",
      "2",
      "-m",
      "32",
      "-d",
      body,
      "-H",
      "content-type: application/grpc",
      "-H",
      "te: trailers",
      `${url}/t.T/Echo`,
    ]);
    expect(stdout).toMatch(/5000 succeeded, 0 failed, 0 errored/);
    expect(stdout).toMatch(/status codes: 5000 2xx/);
  }, 60_000);
});

describe("TLS", () => {
  it("serves a client that chose h2 by ALPN, and refuses one that did not", async () => {
    const { cert, key } = selfSignedCert("tollgate-h2-tls-");
    const secure = await startTestServer({ tls: { cert: readFileSync(cert), key: readFileSync(key) } });
    try {
      const session = http2.connect(`https://127.0.0.1:${secure.port}`, { ca: readFileSync(cert) });
      const answer = await call(session, "/t.T/Echo", Buffer.from("over tls"));
      expect(answer.message.toString()).toBe("over tls");
      session.close();
      const h1 = tls.connect({
        host: "127.0.0.1",
        port: secure.port,
        ca: readFileSync(cert),
        ALPNProtocols: ["http/1.1"],
      });
      const ended = await new Promise<string>((resolve) => {
        h1.on("error", (error) => resolve(`error ${error.message}`));
        h1.on("close", () => resolve("closed"));
      });
      expect(ended).toMatch(/closed|error/);
    } finally {
      await secure.close();
    }
  });
});

describe("random bytes", () => {
  it("never take the process down: each connection ends in GOAWAY or lives on, and the server serves", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.uint8Array({ minLength: 1, maxLength: 400 }),
        fc.boolean(),
        async (bytes, prefaced) => {
          const client = await RawClient.connect(server.port, { preface: false });
          if (prefaced) client.send(PREFACE, settings());
          client.send(Buffer.from(bytes));
          await new Promise((resolve) => setTimeout(resolve, 5));
          client.close();
        },
      ),
      { numRuns: 300 },
    );
    const session = http2.connect(url);
    expect((await call(session, "/t.T/Echo", Buffer.from("alive"))).message.toString()).toBe("alive");
    session.close();
    expect(server.errors).toEqual([]);
  }, 60_000);
});
