// tollgate's gRPC server resets a call whose request has not fully arrived 10 s after its stream
// opened (REQUEST_TIMEOUT_MS, found by the once-a-second sweep over each connection's open
// streams), and nothing else: the connection goes on, and its other call is answered.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { E, F, frame, grpcHeaders, grpcMessage, headersOn, RawClient, T } from "../support/h2-raw.js";
import { startTestServer, type TestServer } from "../support/h2-test-server.js";

let server: TestServer;

beforeAll(async () => {
  server = await startTestServer();
});

afterAll(async () => {
  await server?.close();
});

describe("a request that never finishes arriving", () => {
  it("is reset with CANCEL 10-13 s after it opened, while the connection's other call is answered", async () => {
    const client = await RawClient.connect(server.port);
    const message = grpcMessage(Buffer.from("half"));
    // Stream 1: headers and half its message, never the rest.
    client.send(
      frame(T.HEADERS, F.END_HEADERS, 1, grpcHeaders("/t.T/Echo")),
      frame(T.DATA, 0, 1, message.subarray(0, 4)),
    );
    const opened = Date.now();
    // Stream 3, later: a whole call, answered at once.
    client.send(
      frame(T.HEADERS, F.END_HEADERS, 3, grpcHeaders("/t.T/Echo")),
      frame(T.DATA, F.END_STREAM, 3, grpcMessage(Buffer.from("whole"))),
    );
    await client.waitFor((f) => f.stream === 3 && f.type === T.HEADERS && (f.flags & F.END_STREAM) !== 0);
    expect(headersOn(client, 3).at(-1)?.["grpc-status"]).toBe("0");
    expect(await client.reset(1, 16_000)).toBe(E.CANCEL);
    const waited = Date.now() - opened;
    expect(waited).toBeGreaterThanOrEqual(10_000);
    expect(waited).toBeLessThan(13_500);
    expect(client.closed).toBe(false);
    client.close();
  }, 25_000);
});
