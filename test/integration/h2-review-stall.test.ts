// A review of tollgate's own HTTP/2 server: a client that never opens its flow-control window holds
// its streams and their answers. The server's one-second sweep runs on a fake clock here, so that
// hours pass in milliseconds; sockets stay real.
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { F, frame, grpcHeaders, grpcMessage, RawClient, settings, T } from "../support/h2-raw.js";
import { startTestServer, type TestServer } from "../support/h2-test-server.js";

let server: TestServer;

beforeAll(async () => {
  vi.useFakeTimers({ toFake: ["setInterval", "clearInterval"] });
  server = await startTestServer();
});

afterAll(async () => {
  vi.useRealTimers();
  await server?.close();
});

describe("a client that never reads its answers", () => {
  it("(the fake clock drives the sweep: an idle connection is closed after 5 minutes)", async () => {
    const client = await RawClient.connect(server.port);
    await client.waitFor((f) => f.type === T.SETTINGS);
    for (let s = 0; s < 400; s++) vi.advanceTimersByTime(1000);
    await client.closedBy();
  });

  it("does not hold 1,000 streams and their answers on a connection for an hour", async () => {
    const client = await RawClient.connect(server.port);
    client.send(settings([[4, 0]]));
    const calls: Buffer[] = [];
    for (let i = 0; i < 1000; i++) {
      calls.push(
        frame(T.HEADERS, F.END_HEADERS, 1 + 2 * i, grpcHeaders("/t.T/Echo")),
        frame(T.DATA, F.END_STREAM, 1 + 2 * i, grpcMessage(Buffer.alloc(1000))),
      );
    }
    client.send(...calls);
    await client.waitFor((f) => f.type === T.HEADERS && f.stream === 1999, 10_000);
    // An hour of the server's sweep; the client answers nothing but the server's own frames.
    for (let s = 0; s < 3600; s++) vi.advanceTimersByTime(1000);
    await new Promise((resolve) => setTimeout(resolve, 100));
    const resets = client.frames.filter((f) => f.type === T.RST_STREAM).length;
    const ended = client.closed || client.frames.some((f) => f.type === T.GOAWAY);
    client.close();
    expect(ended || resets === 1000).toBe(true);
  });
});
