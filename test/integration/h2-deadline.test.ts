// The gRPC server's call deadlines (grpc-timeout) and its bound on server-streaming calls, seen by
// node:http2's client (nghttp2): a call unanswered at its deadline is answered DEADLINE_EXCEEDED and
// left by its caller, as is one its client resets; one without grpc-timeout (or with a malformed one)
// waits for its answer as before; tollgate's health Watch calls are bounded on the whole listener.
import * as http2 from "node:http2";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { messages } from "../../src/frontends/envoy-grpc/protos.js";
import { h2Call } from "../support/h2-call.js";
import { grpcMessage } from "../support/h2-raw.js";
import { startTestServer, type TestServer } from "../support/h2-test-server.js";
import { sleep, startInProcess } from "../support/in-process.js";

/** google.rpc.Code */
const Code = { OK: "0", DEADLINE_EXCEEDED: "4", RESOURCE_EXHAUSTED: "8" };

let server: TestServer;
let session: http2.ClientHttp2Session;

beforeAll(async () => {
  server = await startTestServer({ maxServerStreams: 3 });
  session = http2.connect(`http://127.0.0.1:${server.port}`);
});

// A Hold call a failed test left waiting must not count in the next test's held().
afterEach(() => server.release());

afterAll(async () => {
  session?.destroy();
  await server?.close();
});

/** A unary call of `body`; its message back as text. */
const call = async (path: string, body: string, headers: http2.OutgoingHttpHeaders = {}) => {
  const answer = await h2Call(session, path, Buffer.from(body), { headers });
  return { ...answer, message: answer.message.toString() };
};

describe("a unary call with grpc-timeout", () => {
  it("unanswered at its deadline is answered DEADLINE_EXCEEDED then, and its caller leaves it", async () => {
    const left = server.left();
    const answer = await call("/t.T/Hold", "late", { "grpc-timeout": "100m" });
    expect(answer.status).toBe(Code.DEADLINE_EXCEEDED);
    // Far from the deadline's 100 ms only on a machine this loaded: the bound leaves it room.
    expect(answer.ms).toBeLessThan(1_500);
    expect(server.left()).toBe(left + 1);
    expect(server.finished.at(-1)).toBe("DEADLINE_EXCEEDED");
    server.release();
  });

  it("answered in time is answered as usual, and counts as its method counted", async () => {
    const left = server.left();
    const answer = call("/t.T/Hold", "prompt", { "grpc-timeout": "5S" });
    await expect.poll(() => server.held()).toBe(1);
    server.release();
    expect(await answer).toMatchObject({ status: Code.OK, message: "prompt" });
    await sleep(50);
    expect(server.left()).toBe(left);
  });

  it("of a deadline already past (0) is answered DEADLINE_EXCEEDED without waiting", async () => {
    const answer = await call("/t.T/Hold", "none", { "grpc-timeout": "0n" });
    expect(answer.status).toBe(Code.DEADLINE_EXCEEDED);
    server.release();
  });
});

describe("a unary call without a usable grpc-timeout", () => {
  for (const [name, headers] of [
    ["without the header", {}],
    ["with a malformed value", { "grpc-timeout": "100 ms" }],
  ] as const) {
    it(`${name} waits for its answer however long it takes, as before`, async () => {
      const left = server.left();
      const answer = call("/t.T/Hold", "slow", headers);
      await sleep(400);
      expect(server.held()).toBe(1);
      server.release();
      expect(await answer).toMatchObject({ status: Code.OK, message: "slow" });
      expect(server.left()).toBe(left);
    });
  }

  it("reset by its client before its answer is left by its caller", async () => {
    const left = server.left();
    const req = session.request({
      ":method": "POST",
      ":path": "/t.T/Hold",
      "content-type": "application/grpc",
      te: "trailers",
    });
    req.on("error", () => undefined);
    req.end(grpcMessage(Buffer.from("reset")));
    await expect.poll(() => server.held()).toBe(1);
    req.close(http2.constants.NGHTTP2_CANCEL);
    await expect.poll(() => server.left()).toBe(left + 1);
    expect(server.finished.at(-1)).toBe("CANCELLED");
    server.release();
  });
});

describe("server-streaming calls", () => {
  /** A Watch call: its first message's arrival, and its status when it ends. */
  function watch(headers: http2.OutgoingHttpHeaders = {}) {
    const req = session.request({
      ":method": "POST",
      ":path": "/t.T/Watch",
      "content-type": "application/grpc",
      te: "trailers",
      ...headers,
    });
    req.on("error", () => undefined);
    const first = new Promise<void>((resolve) => req.once("data", () => resolve()));
    const ended = new Promise<string | undefined>((resolve) => {
      let status: string | undefined;
      req.on("response", (h) => {
        status = h["grpc-status"] as string | undefined;
      });
      req.on("trailers", (t) => {
        status = t["grpc-status"] as string | undefined;
      });
      req.on("close", () => resolve(status));
      req.resume();
    });
    req.end(grpcMessage(Buffer.from("w")));
    return { req, first, ended };
  }

  it("end with DEADLINE_EXCEEDED at their grpc-timeout", async () => {
    const started = performance.now();
    const w = watch({ "grpc-timeout": "300m" });
    await w.first;
    expect(await w.ended).toBe(Code.DEADLINE_EXCEEDED);
    expect(performance.now() - started).toBeLessThan(2_000);
    await expect.poll(() => server.watches.size).toBe(0);
  });

  it("are refused RESOURCE_EXHAUSTED past the server's bound, and taken again once one ends", async () => {
    const open = [watch(), watch(), watch()];
    await Promise.all(open.map((w) => w.first));
    expect(server.watches.size).toBe(3);
    const refused = watch();
    const outcome = await Promise.race([refused.ended, refused.first.then(() => "streaming")]);
    refused.req.close(http2.constants.NGHTTP2_CANCEL);
    expect(outcome).toBe(Code.RESOURCE_EXHAUSTED);
    // Unary calls are not bounded by it.
    expect((await call("/t.T/Echo", "e")).status).toBe(Code.OK);
    open[0]?.req.close(http2.constants.NGHTTP2_CANCEL);
    await expect.poll(() => server.watches.size).toBe(2);
    const again = watch();
    await again.first;
    expect(server.watches.size).toBe(3);
    for (const w of [...open.slice(1), again]) w.req.close(http2.constants.NGHTTP2_CANCEL);
    await expect.poll(() => server.watches.size).toBe(0);
  });
});

describe("tollgate's health Watch", () => {
  it("is refused RESOURCE_EXHAUSTED past 1,000 open at once on the listener, whatever their connections", async () => {
    const tollgate = await startInProcess({ env: { LOG_LEVEL: "silent" } });
    // One connection takes 1,000 streams (its SETTINGS): the bound is the server's, seen from a second.
    const sessions = [http2.connect(tollgate.grpcUrl), http2.connect(tollgate.grpcUrl)];
    const request = grpcMessage(messages.HealthCheckRequest.encode({ service: "" }).finish());
    const watch = (s: http2.ClientHttp2Session) => {
      const req = s.request({
        ":method": "POST",
        ":path": "/grpc.health.v1.Health/Watch",
        "content-type": "application/grpc",
        te: "trailers",
      });
      req.on("error", () => undefined);
      let status: string | undefined;
      req.on("response", (h) => {
        status = h["grpc-status"] as string | undefined;
      });
      const first = new Promise<string>((resolve) => {
        req.once("data", () => resolve("streaming"));
        req.once("close", () => resolve(`ended ${status}`));
      });
      req.resume();
      req.end(request);
      return { req, first };
    };
    try {
      const open = Array.from({ length: 1_000 }, () => watch(sessions[0] as http2.ClientHttp2Session));
      expect(new Set(await Promise.all(open.map((w) => w.first)))).toEqual(new Set(["streaming"]));
      expect(await watch(sessions[1] as http2.ClientHttp2Session).first).toBe(
        `ended ${Code.RESOURCE_EXHAUSTED}`,
      );
      // One ends: another is taken.
      open[0]?.req.close(http2.constants.NGHTTP2_CANCEL);
      await sleep(200);
      expect(await watch(sessions[1] as http2.ClientHttp2Session).first).toBe("streaming");
    } finally {
      for (const s of sessions) s.destroy();
      await tollgate.close();
    }
  });
});
