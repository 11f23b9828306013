// tollgate's own HTTP/2 server frame by frame (RFC 9113), through a raw client: the preface,
// padding, CONTINUATION, stream id rules, SETTINGS and WINDOW_UPDATE validation, flow control on
// the answer side, and each abuse bound ending in its GOAWAY or RST_STREAM. Every test then checks
// that the server still answers a fresh connection.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  E,
  F,
  frame,
  grpcHeaders,
  grpcMessage,
  headersOn,
  PREFACE,
  RawClient,
  settings,
  T,
  u32,
} from "../support/h2-raw.js";
import { startTestServer, type TestServer } from "../support/h2-test-server.js";

let server: TestServer;

beforeAll(async () => {
  server = await startTestServer();
});

afterAll(async () => {
  await server?.close();
});

const ECHO = "/t.T/Echo";
const connect = () => RawClient.connect(server.port);

/** Waits for a call's end (a frame with END_STREAM) and returns its status, headers and message bytes. */
async function answer(client: RawClient, stream: number) {
  await client.waitFor(
    (f) =>
      f.stream === stream && (f.type === T.HEADERS || f.type === T.DATA) && (f.flags & F.END_STREAM) !== 0,
  );
  const blocks = headersOn(client, stream);
  const last = blocks[blocks.length - 1] ?? {};
  const data = Buffer.concat(
    client.frames.filter((f) => f.type === T.DATA && f.stream === stream).map((f) => f.payload),
  );
  return { status: last["grpc-status"], headers: blocks[0] ?? {}, data };
}

function call(client: RawClient, stream: number, message: Buffer, path = ECHO): void {
  client.send(
    frame(T.HEADERS, F.END_HEADERS, stream, grpcHeaders(path)),
    frame(T.DATA, F.END_STREAM, stream, grpcMessage(message)),
  );
}

/** The server still serves a call on a new connection. */
async function stillServes(): Promise<void> {
  const client = await connect();
  call(client, 1, Buffer.from("ok"));
  const result = await answer(client, 1);
  expect(result.status).toBe("0");
  expect(result.data.subarray(5).toString()).toBe("ok");
  client.close();
}

async function goawayFor(...chunks: Buffer[]): Promise<number> {
  const client = await connect();
  client.send(...chunks);
  const code = await client.goaway();
  await client.closedBy();
  return code;
}

describe("the connection's start", () => {
  it("sends its SETTINGS and a connection WINDOW_UPDATE, acknowledges the client's, and answers PING", async () => {
    const client = await connect();
    const ours = await client.waitFor((f) => f.type === T.SETTINGS && (f.flags & F.ACK) === 0);
    const values = new Map<number, number>();
    for (let i = 0; i < ours.payload.length; i += 6)
      values.set(ours.payload.readUInt16BE(i), ours.payload.readUInt32BE(i + 2));
    expect(values.get(3)).toBe(1000);
    expect(values.get(6)).toBe(65536);
    await client.waitFor((f) => f.type === T.WINDOW_UPDATE && f.stream === 0);
    await client.waitFor((f) => f.type === T.SETTINGS && (f.flags & F.ACK) !== 0);
    client.send(frame(T.PING, 0, 0, Buffer.from("12345678")));
    const pong = await client.waitFor((f) => f.type === T.PING);
    expect(pong.flags & F.ACK).toBe(F.ACK);
    expect(pong.payload.toString()).toBe("12345678");
    client.close();
  });

  it("answers a connection that does not begin with the preface, or whose first frame is not SETTINGS, with PROTOCOL_ERROR", async () => {
    const bad = await RawClient.connect(server.port, { preface: false });
    bad.send(Buffer.from("GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
    expect(await bad.goaway()).toBe(E.PROTOCOL_ERROR);
    await bad.closedBy();
    const noSettings = await RawClient.connect(server.port, { preface: false });
    noSettings.send(PREFACE, frame(T.PING, 0, 0, Buffer.alloc(8)));
    expect(await noSettings.goaway()).toBe(E.PROTOCOL_ERROR);
    await stillServes();
  });
});

describe("frames", () => {
  it("answers a call whose HEADERS and DATA are padded, and whose HEADERS carries priority fields", async () => {
    const client = await connect();
    const block = grpcHeaders(ECHO);
    const headers = Buffer.concat([Buffer.from([3]), u32(0), Buffer.from([15]), block, Buffer.alloc(3)]);
    const message = grpcMessage(Buffer.from("padded"));
    const data = Buffer.concat([Buffer.from([7]), message, Buffer.alloc(7)]);
    client.send(
      frame(T.HEADERS, F.END_HEADERS | F.PADDED | F.PRIORITY, 1, headers),
      frame(T.DATA, F.END_STREAM | F.PADDED, 1, data),
    );
    const result = await answer(client, 1);
    expect(result.headers[":status"]).toBe("200");
    expect(result.headers["content-type"]).toBe("application/grpc");
    expect(result.status).toBe("0");
    expect(result.data.subarray(5).toString()).toBe("padded");
    client.close();
  });

  it("takes a header block split over CONTINUATION frames, and a request split over many DATA frames", async () => {
    const client = await connect();
    const block = grpcHeaders(ECHO, [["x-request-id", "r-1"]]);
    const message = grpcMessage(Buffer.alloc(100_000, 7));
    client.send(
      frame(T.HEADERS, 0, 1, block.subarray(0, 10)),
      frame(T.CONTINUATION, 0, 1, block.subarray(10, 20)),
      frame(T.CONTINUATION, F.END_HEADERS, 1, block.subarray(20)),
    );
    for (let at = 0; at < message.length; at += 1000) {
      const end = Math.min(message.length, at + 1000);
      client.send(frame(T.DATA, end === message.length ? F.END_STREAM : 0, 1, message.subarray(at, end)));
    }
    // The default 65,535-byte windows of the answer are opened for the 100 kB echo.
    client.send(frame(T.WINDOW_UPDATE, 0, 0, u32(1 << 20)), frame(T.WINDOW_UPDATE, 0, 1, u32(1 << 20)));
    const result = await answer(client, 1);
    expect(result.status).toBe("0");
    expect(result.data.subarray(5)).toEqual(Buffer.alloc(100_000, 7));
    client.close();
  });

  it.each([
    ["a frame over SETTINGS_MAX_FRAME_SIZE", [frame(T.DATA, 0, 1, Buffer.alloc(16_385))], E.FRAME_SIZE_ERROR],
    [
      "padding as long as the frame",
      [
        frame(T.HEADERS, F.END_HEADERS, 1, grpcHeaders(ECHO)),
        frame(T.DATA, F.PADDED, 1, Buffer.from([4, 0, 0, 0])),
      ],
      E.PROTOCOL_ERROR,
    ],
    [
      "a frame between HEADERS and its CONTINUATION",
      [frame(T.HEADERS, 0, 1, grpcHeaders(ECHO)), frame(T.PING, 0, 0, Buffer.alloc(8))],
      E.PROTOCOL_ERROR,
    ],
    [
      "CONTINUATION without HEADERS",
      [frame(T.CONTINUATION, F.END_HEADERS, 1, grpcHeaders(ECHO))],
      E.PROTOCOL_ERROR,
    ],
    [
      "CONTINUATION on another stream",
      [frame(T.HEADERS, 0, 1, grpcHeaders(ECHO)), frame(T.CONTINUATION, F.END_HEADERS, 3, Buffer.alloc(0))],
      E.PROTOCOL_ERROR,
    ],
    ["an even stream id", [frame(T.HEADERS, F.END_HEADERS, 2, grpcHeaders(ECHO))], E.PROTOCOL_ERROR],
    ["DATA on an idle stream", [frame(T.DATA, 0, 5, Buffer.alloc(3))], E.PROTOCOL_ERROR],
    ["DATA on stream 0", [frame(T.DATA, 0, 0, Buffer.alloc(3))], E.PROTOCOL_ERROR],
    ["RST_STREAM on an idle stream", [frame(T.RST_STREAM, 0, 7, u32(8))], E.PROTOCOL_ERROR],
    ["a PING of 7 bytes", [frame(T.PING, 0, 0, Buffer.alloc(7))], E.FRAME_SIZE_ERROR],
    ["SETTINGS on a stream", [frame(T.SETTINGS, 0, 1, Buffer.alloc(0))], E.PROTOCOL_ERROR],
    ["SETTINGS of 5 bytes", [frame(T.SETTINGS, 0, 0, Buffer.alloc(5))], E.FRAME_SIZE_ERROR],
    ["ENABLE_PUSH of 2", [settings([[2, 2]])], E.PROTOCOL_ERROR],
    ["INITIAL_WINDOW_SIZE of 2^31", [settings([[4, 2 ** 31]])], E.FLOW_CONTROL_ERROR],
    ["MAX_FRAME_SIZE of 100", [settings([[5, 100]])], E.PROTOCOL_ERROR],
    ["a WINDOW_UPDATE of 0 on the connection", [frame(T.WINDOW_UPDATE, 0, 0, u32(0))], E.PROTOCOL_ERROR],
    [
      "a connection window past 2^31-1",
      [frame(T.WINDOW_UPDATE, 0, 0, u32(2 ** 31 - 1))],
      E.FLOW_CONTROL_ERROR,
    ],
    [
      "PUSH_PROMISE from a client",
      [frame(T.PUSH_PROMISE, F.END_HEADERS, 1, Buffer.alloc(4))],
      E.PROTOCOL_ERROR,
    ],
    [
      "a header block that does not decode",
      [frame(T.HEADERS, F.END_HEADERS, 1, Buffer.from([0x80]))],
      E.COMPRESSION_ERROR,
    ],
  ])("answers %s with GOAWAY and its code", async (_name, chunks, code) => {
    expect(await goawayFor(...chunks)).toBe(code);
    await stillServes();
  });

  it("answers HEADERS on a stream the client closed with STREAM_CLOSED, and ignores unknown frame types", async () => {
    const client = await connect();
    client.send(frame(0x20, 0, 0, Buffer.from("whatever")));
    call(client, 1, Buffer.from("one"));
    await answer(client, 1);
    client.send(frame(T.HEADERS, F.END_HEADERS | F.END_STREAM, 1, grpcHeaders(ECHO)));
    expect(await client.goaway()).toBe(E.STREAM_CLOSED);
    client.close();
  });

  it("resets a stream whose window would pass 2^31-1, and one that sends DATA after END_STREAM", async () => {
    const client = await connect();
    client.send(frame(T.HEADERS, F.END_HEADERS, 1, grpcHeaders("/t.T/Hold")));
    client.send(frame(T.WINDOW_UPDATE, 0, 1, u32(2 ** 31 - 1)));
    expect(await client.reset(1)).toBe(E.FLOW_CONTROL_ERROR);
    // A call held by its method: half-closed (remote) until it is answered.
    call(client, 3, Buffer.from("held"), "/t.T/Hold");
    client.send(frame(T.DATA, 0, 3, Buffer.alloc(4)));
    expect(await client.reset(3)).toBe(E.STREAM_CLOSED);
    // The connection lives on.
    call(client, 5, Buffer.from("five"));
    expect((await answer(client, 5)).status).toBe("0");
    client.close();
    server.release();
  });
});

describe("the drain", () => {
  it("sends GOAWAY with the last stream taken, ignores streams opened after it, answers the one in flight, then closes", async () => {
    const draining = await startTestServer();
    try {
      const client = await RawClient.connect(draining.port);
      call(client, 1, Buffer.from("in flight"), "/t.T/Hold");
      await expect.poll(() => draining.held()).toBe(1);
      const drained = draining.drain();
      const goaway = await client.waitFor((f) => f.type === T.GOAWAY);
      expect(goaway.payload.readUInt32BE(0)).toBe(1);
      expect(goaway.payload.readUInt32BE(4)).toBe(E.NO_ERROR);
      // A call the client sent before it saw the GOAWAY: never started, its frames ignored.
      call(client, 3, Buffer.from("too late"));
      client.send(frame(T.DATA, F.END_STREAM, 3, Buffer.alloc(2)));
      await new Promise((resolve) => setTimeout(resolve, 50));
      draining.release();
      const result = await answer(client, 1);
      expect(result.status).toBe("0");
      expect(result.data.subarray(5).toString()).toBe("in flight");
      expect(client.frames.some((f) => f.stream === 3)).toBe(false);
      await client.closedBy();
      await drained;
      expect(draining.started).toBe(1);
    } finally {
      await draining.close();
    }
  });
});

describe("flow control of the answers", () => {
  it("sends an answer within a one-byte window as the client opens it, trailers last", async () => {
    const client = await connect();
    client.send(settings([[4, 1]]));
    call(client, 1, Buffer.from("abc"));
    await client.waitFor((f) => f.type === T.DATA && f.stream === 1);
    expect(client.frames.filter((f) => f.type === T.DATA).map((f) => f.payload.length)).toEqual([1]);
    for (let i = 0; i < 7; i++) client.send(frame(T.WINDOW_UPDATE, 0, 1, u32(1)));
    const result = await answer(client, 1);
    expect(result.status).toBe("0");
    expect(result.data).toEqual(grpcMessage(Buffer.from("abc")));
    expect(client.frames.filter((f) => f.type === T.DATA).every((f) => f.payload.length === 1)).toBe(true);
    client.close();
  });

  it("holds an answer for a client whose window is closed until it opens it, and its other calls go on", async () => {
    const client = await connect();
    client.send(settings([[4, 0]]));
    call(client, 1, Buffer.from("waits"));
    await client.waitFor((f) => f.type === T.HEADERS && f.stream === 1);
    client.send(settings([[4, 100]]));
    const result = await answer(client, 1);
    expect(result.data.subarray(5).toString()).toBe("waits");
    client.close();
  });
});

describe("abuse bounds", () => {
  it("resets a streaming call whose client never opens its window once 1 MiB more waits, and tells the method", async () => {
    const client = await connect();
    client.send(settings([[4, 0]]));
    const message = grpcMessage(Buffer.alloc(300_000, 5));
    const chunks = [frame(T.HEADERS, F.END_HEADERS, 1, grpcHeaders("/t.T/Watch"))];
    for (let at = 0; at < message.length; at += 16_384) {
      const end = Math.min(message.length, at + 16_384);
      chunks.push(frame(T.DATA, end === message.length ? F.END_STREAM : 0, 1, message.subarray(at, end)));
    }
    client.send(...chunks);
    // Watch writes its 300 kB request back every 200 ms: the fifth write passes the bound.
    expect(await client.reset(1, 5000)).toBe(E.CANCEL);
    await expect.poll(() => server.watches.size).toBe(0);
    expect(client.frames.some((f) => f.type === T.DATA && f.stream === 1)).toBe(false);
    client.close();
  });

  it("refuses a stream beyond SETTINGS_MAX_CONCURRENT_STREAMS with REFUSED_STREAM", async () => {
    const client = await connect();
    const frames: Buffer[] = [];
    for (let i = 0; i < 1001; i++) frames.push(frame(T.HEADERS, F.END_HEADERS, 1 + 2 * i, grpcHeaders(ECHO)));
    client.send(...frames);
    expect(await client.reset(2001)).toBe(E.REFUSED_STREAM);
    client.close();
    await stillServes();
  });

  it("ends a rapid-reset connection (HEADERS then RST_STREAM, over and over) with ENHANCE_YOUR_CALM", async () => {
    const client = await connect();
    const frames: Buffer[] = [];
    for (let i = 0; i < 1100; i++) {
      frames.push(
        frame(T.HEADERS, F.END_HEADERS, 1 + 2 * i, grpcHeaders("/t.T/Hold")),
        frame(T.RST_STREAM, 0, 1 + 2 * i, u32(E.CANCEL)),
      );
    }
    client.send(...frames);
    expect(await client.goaway()).toBe(E.ENHANCE_YOUR_CALM);
    await client.closedBy();
    server.release();
    await stillServes();
  });

  it.each([
    [
      "a CONTINUATION flood",
      () => [
        frame(T.HEADERS, 0, 1, Buffer.alloc(0)),
        ...Array.from({ length: 70 }, () => frame(T.CONTINUATION, 0, 1, Buffer.alloc(0))),
      ],
    ],
    [
      "a header block over 256 KiB",
      () => [
        frame(T.HEADERS, 0, 1, Buffer.alloc(16_000)),
        ...Array.from({ length: 17 }, () => frame(T.CONTINUATION, 0, 1, Buffer.alloc(16_000))),
      ],
    ],
    ["a PING flood", () => Array.from({ length: 20_000 }, () => frame(T.PING, 0, 0, Buffer.alloc(8)))],
    ["a SETTINGS flood", () => Array.from({ length: 20_000 }, () => settings())],
    [
      "DATA on a stream the server reset",
      () => [
        frame(T.HEADERS, F.END_HEADERS, 1, grpcHeaders("/t.T/Nope")),
        ...Array.from({ length: 20_000 }, () => frame(T.DATA, 0, 1, Buffer.alloc(1))),
      ],
    ],
    [
      "an empty DATA flood",
      () => [
        frame(T.HEADERS, F.END_HEADERS, 1, grpcHeaders(ECHO)),
        ...Array.from({ length: 20_000 }, () => frame(T.DATA, 0, 1)),
      ],
    ],
  ])("ends %s with ENHANCE_YOUR_CALM", async (_name, make) => {
    expect(await goawayFor(...make())).toBe(E.ENHANCE_YOUR_CALM);
    await stillServes();
  });

  it("answers a call whose metadata is over 64 KiB with RESOURCE_EXHAUSTED, and the connection goes on", async () => {
    const client = await connect();
    const block = grpcHeaders(ECHO, [["x-big", "a".repeat(70_000)]]);
    const parts: Buffer[] = [];
    for (let at = 0; at < block.length; at += 16_000) parts.push(block.subarray(at, at + 16_000));
    client.send(
      ...parts.map((part, i) =>
        frame(i === 0 ? T.HEADERS : T.CONTINUATION, i === parts.length - 1 ? F.END_HEADERS : 0, 1, part),
      ),
    );
    client.send(frame(T.DATA, F.END_STREAM, 1, grpcMessage(Buffer.alloc(0))));
    expect((await answer(client, 1)).status).toBe("8");
    call(client, 3, Buffer.from("next"));
    expect((await answer(client, 3)).status).toBe("0");
    client.close();
  });

  it("cuts a connection that asks for answers and never reads them", async () => {
    const big = await startTestServer({ maxMessageBytes: 16 * 1024 * 1024 });
    try {
      const client = await RawClient.connect(big.port);
      client.send(
        settings([
          [4, 2 ** 31 - 1],
          [5, 16_777_215],
        ]),
        frame(T.WINDOW_UPDATE, 0, 0, u32(2 ** 31 - 1 - 65_535)),
      );
      client.socket.pause();
      const message = grpcMessage(Buffer.alloc(1 << 20, 1));
      for (let i = 0; i < 24; i++) {
        const id = 1 + 2 * i;
        const chunks = [frame(T.HEADERS, F.END_HEADERS, id, grpcHeaders(ECHO))];
        for (let at = 0; at < message.length; at += 16_384) {
          const end = Math.min(message.length, at + 16_384);
          chunks.push(
            frame(T.DATA, end === message.length ? F.END_STREAM : 0, id, message.subarray(at, end)),
          );
        }
        client.send(...chunks);
      }
      await client.closedBy(10_000);
    } finally {
      await big.close();
    }
  });
});
