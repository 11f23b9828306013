// A review of tollgate's own HTTP/2 server (RFC 9113, RFC 7541) through the raw client: each test
// states a rule a real client relies on, and fails while the server breaks it.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  E,
  F,
  type Frame,
  frame,
  grpcHeaders,
  grpcMessage,
  headersOn,
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
const HOLD = "/t.T/Hold";

/** The stream's end: its grpc-status, or the RST_STREAM code, or a GOAWAY's error code (NO_ERROR is a drain, not an end). */
async function outcome(client: RawClient, stream: number, ms = 3000): Promise<string> {
  const f = await client.waitFor(
    (x) =>
      (x.stream === stream &&
        (x.type === T.RST_STREAM ||
          ((x.type === T.HEADERS || x.type === T.DATA) && (x.flags & F.END_STREAM) !== 0))) ||
      (x.type === T.GOAWAY && x.payload.readUInt32BE(4) !== E.NO_ERROR),
    ms,
  );
  if (f.type === T.GOAWAY) return `GOAWAY ${f.payload.readUInt32BE(4)}`;
  if (f.type === T.RST_STREAM) return `RST_STREAM ${f.payload.readUInt32BE(0)}`;
  const blocks = headersOn(client, stream);
  return `grpc-status ${blocks[blocks.length - 1]?.["grpc-status"]}`;
}

const goaways = (client: RawClient): Frame[] => client.frames.filter((f) => f.type === T.GOAWAY);

/** A literal-without-indexing field, no Huffman (names and values under 127 bytes). */
function field(name: string, value: string): Buffer {
  const n = Buffer.from(name, "latin1");
  const v = Buffer.from(value, "latin1");
  return Buffer.concat([Buffer.from([0, n.length]), n, Buffer.from([v.length]), v]);
}

function block(fields: [string, string][]): Buffer {
  return Buffer.concat(fields.map(([name, value]) => field(name, value)));
}

async function waitUntil(check: () => boolean, ms = 3000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!check()) {
    if (Date.now() > deadline) throw new Error("timed out");
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

describe("GOAWAY and the drain (RFC 9113 section 6.8)", () => {
  it("ignores a stream the client opened before it saw the drain's GOAWAY, its DATA included, and answers the call in flight", async () => {
    const own = await startTestServer();
    const client = await RawClient.connect(own.port);
    client.send(
      frame(T.HEADERS, F.END_HEADERS, 1, grpcHeaders(HOLD)),
      frame(T.DATA, F.END_STREAM, 1, grpcMessage(Buffer.from("in flight"))),
    );
    await waitUntil(() => own.held() === 1);
    void own.drain();
    await client.waitFor((f) => f.type === T.GOAWAY);
    // Envoy's HEADERS and DATA of a new call, sent before the GOAWAY reached it (two frames, as a
    // call whose body is written after its headers).
    client.send(frame(T.HEADERS, F.END_HEADERS, 3, grpcHeaders(ECHO)));
    client.send(frame(T.DATA, F.END_STREAM, 3, grpcMessage(Buffer.from("late"))));
    await new Promise((resolve) => setTimeout(resolve, 200));
    own.release();
    expect(await outcome(client, 1)).toBe("grpc-status 0");
    // Only the drain's GOAWAY (NO_ERROR): no connection error for frames on a stream it ignored.
    expect(goaways(client).map((f) => f.payload.readUInt32BE(4))).toEqual([E.NO_ERROR]);
    expect(own.finished).toEqual(["OK"]);
    client.close();
    await own.close();
  });

  it("never raises the last stream id of a later GOAWAY above the drain's", async () => {
    const own = await startTestServer();
    const client = await RawClient.connect(own.port);
    client.send(
      frame(T.HEADERS, F.END_HEADERS, 1, grpcHeaders(HOLD)),
      frame(T.DATA, F.END_STREAM, 1, grpcMessage(Buffer.from("in flight"))),
    );
    await waitUntil(() => own.held() === 1);
    void own.drain();
    await client.waitFor((f) => f.type === T.GOAWAY);
    // A whole call the server must ignore, then a connection error (a PING of a bad length).
    client.send(
      frame(T.HEADERS, F.END_HEADERS, 3, grpcHeaders(ECHO)),
      frame(T.DATA, F.END_STREAM, 3, grpcMessage(Buffer.from("late"))),
    );
    client.send(frame(T.PING, 0, 0, Buffer.alloc(3)));
    await client.waitFor((f) => f.type === T.GOAWAY && f.payload.readUInt32BE(4) !== E.NO_ERROR);
    const lastIds = goaways(client).map((f) => f.payload.readUInt32BE(0) & 0x7fffffff);
    expect(lastIds[0]).toBe(1);
    // "Endpoints MUST NOT increase the value they send in the last stream identifier."
    for (const id of lastIds) expect(id).toBeLessThanOrEqual(1);
    client.close();
    own.release();
    await own.close();
  });

  it("answers a call sent with the client's GOAWAY right behind it", async () => {
    const client = await RawClient.connect(server.port);
    const goaway = Buffer.concat([u32(0), u32(E.NO_ERROR)]);
    client.send(
      frame(T.HEADERS, F.END_HEADERS, 1, grpcHeaders(ECHO)),
      frame(T.DATA, F.END_STREAM, 1, grpcMessage(Buffer.from("last call"))),
      frame(T.GOAWAY, 0, 0, goaway),
    );
    expect(await outcome(client, 1)).toBe("grpc-status 0");
    client.close();
  });

  it("acknowledges the SETTINGS and answers the PING sent with the client's GOAWAY", async () => {
    const client = await RawClient.connect(server.port, { preface: false });
    const { PREFACE } = await import("../support/h2-raw.js");
    client.send(
      PREFACE,
      settings(),
      frame(T.PING, 0, 0, Buffer.from("12345678")),
      frame(T.GOAWAY, 0, 0, Buffer.concat([u32(0), u32(E.NO_ERROR)])),
    );
    const ack = await client.waitFor((f) => f.type === T.PING && (f.flags & F.ACK) !== 0);
    expect(ack.payload.toString()).toBe("12345678");
    client.close();
  });
});

describe("streams the server reset (RFC 9113 section 5.1, closed)", () => {
  it("ignores DATA on a stream it reset, however many streams it reset before", async () => {
    const client = await RawClient.connect(server.port);
    // Rounds of 600 calls to an unknown method, each HEADERS then its DATA: the server answers
    // UNIMPLEMENTED on the HEADERS and resets the stream (NO_ERROR) with the DATA still coming.
    // Never more than 600 streams open, well under SETTINGS_MAX_CONCURRENT_STREAMS.
    let next = 1;
    for (let round = 0; round < 2; round++) {
      const ids = Array.from({ length: 600 }, (_, i) => next + 2 * i);
      next += 1200;
      client.send(...ids.map((id) => frame(T.HEADERS, F.END_HEADERS, id, grpcHeaders("/t.T/Nope"))));
      const last = ids[ids.length - 1] as number;
      await client.waitFor((f) => f.type === T.RST_STREAM && f.stream === last);
      client.send(...ids.map((id) => frame(T.DATA, F.END_STREAM, id, grpcMessage(Buffer.from("x")))));
    }
    client.send(
      frame(T.HEADERS, F.END_HEADERS, next, grpcHeaders(ECHO)),
      frame(T.DATA, F.END_STREAM, next, grpcMessage(Buffer.from("after"))),
    );
    expect(await outcome(client, next)).toBe("grpc-status 0");
    expect(goaways(client)).toEqual([]);
    client.close();
  });
});

describe("malformed requests (RFC 9113 sections 8.1.1, 8.2, 8.3.1): a stream error PROTOCOL_ERROR", () => {
  const base: [string, string][] = [
    [":method", "POST"],
    [":scheme", "http"],
    [":path", ECHO],
    [":authority", "localhost"],
    ["content-type", "application/grpc"],
    ["te", "trailers"],
  ];
  const without = (name: string) => base.filter(([n]) => n !== name);
  it.each<[string, [string, string][]]>([
    ["an upper-case field name", [...base, ["X-Upper", "1"]]],
    ["no :scheme", without(":scheme")],
    ["a pseudo-header after a regular field", [...without(":authority"), [":authority", "localhost"]]],
    ["an unknown pseudo-header", [...base.slice(0, 3), [":protocol-x", "1"], ...base.slice(3)]],
    ["two :path fields", [...base.slice(0, 3), [":path", ECHO], ...base.slice(3)]],
    ["a connection-specific field", [...base, ["connection", "keep-alive"]]],
    ["te other than trailers", [...without("te"), ["te", "gzip"]]],
    ["a value holding CR LF", [...base, ["x-request-id", "a\r\nx-evil: 1"]]],
  ])("resets a request with %s", async (_name, fields) => {
    const client = await RawClient.connect(server.port);
    client.send(
      frame(T.HEADERS, F.END_HEADERS, 1, block(fields)),
      frame(T.DATA, F.END_STREAM, 1, grpcMessage(Buffer.from("m"))),
    );
    expect(await outcome(client, 1)).toBe(`RST_STREAM ${E.PROTOCOL_ERROR}`);
    client.close();
  });

  it("resets a request whose trailers carry a pseudo-header", async () => {
    const client = await RawClient.connect(server.port);
    client.send(
      frame(T.HEADERS, F.END_HEADERS, 1, block(base)),
      frame(T.DATA, 0, 1, grpcMessage(Buffer.from("m"))),
      frame(T.HEADERS, F.END_HEADERS | F.END_STREAM, 1, block([[":path", "/other"]])),
    );
    expect(await outcome(client, 1)).toBe(`RST_STREAM ${E.PROTOCOL_ERROR}`);
    client.close();
  });
});

describe("what the server sends within the peer's SETTINGS (sound: kept as regression tests)", () => {
  it("never sends a DATA frame over the default 16384 bytes, and applies an INITIAL_WINDOW_SIZE change to open streams", async () => {
    const client = await RawClient.connect(server.port);
    client.send(settings([[4, 0]]));
    const message = Buffer.alloc(100_000, 7);
    client.send(
      frame(T.HEADERS, F.END_HEADERS, 1, grpcHeaders(ECHO)),
      ...chunks(grpcMessage(message), 16_000).map((c, i, all) =>
        frame(T.DATA, i === all.length - 1 ? F.END_STREAM : 0, 1, c),
      ),
    );
    await client.waitFor((f) => f.type === T.HEADERS && f.stream === 1);
    expect(client.frames.some((f) => f.type === T.DATA)).toBe(false);
    // Both windows opened: the stream's by SETTINGS (section 6.9.2), the connection's by WINDOW_UPDATE.
    client.send(settings([[4, 200_000]]), frame(T.WINDOW_UPDATE, 0, 0, u32(200_000)));
    expect(await outcome(client, 1)).toBe("grpc-status 0");
    const data = client.frames.filter((f) => f.type === T.DATA);
    expect(Math.max(...data.map((f) => f.payload.length))).toBeLessThanOrEqual(16_384);
    expect(Buffer.concat(data.map((f) => f.payload))).toEqual(grpcMessage(message));
    client.close();
  });
});

function chunks(buf: Buffer, size: number): Buffer[] {
  const out: Buffer[] = [];
  for (let at = 0; at < buf.length; at += size) out.push(buf.subarray(at, at + size));
  return out;
}

describe("PINGs that come with work (grpc-go's BDP estimator)", () => {
  it("serves a client that sends a PING whenever answers arrive and none is outstanding, at a few thousand calls/s for 14 s", async () => {
    const client = await RawClient.connect(server.port);
    const started = Date.now();
    let next = 1;
    let done = 0;
    let pings = 0;
    let outstanding = false;
    let seen = 0;
    const open = (): void => {
      client.send(
        frame(T.HEADERS, F.END_HEADERS, next, grpcHeaders(ECHO)),
        frame(T.DATA, F.END_STREAM, next, grpcMessage(Buffer.from("bdp"))),
      );
      next += 2;
    };
    const finished = new Promise<string>((resolve) => {
      client.socket.on("data", () => {
        let answered = 0;
        let data = false;
        for (; seen < client.frames.length; seen++) {
          const f = client.frames[seen] as Frame;
          if (f.type === T.GOAWAY) resolve(`GOAWAY ${f.payload.readUInt32BE(4)} after ${pings} PINGs`);
          if (f.type === T.PING && f.flags & F.ACK) outstanding = false;
          if (f.type === T.DATA) data = true;
          if (f.type === T.HEADERS && f.flags & F.END_STREAM) answered += 1;
        }
        // As grpc-go: data received and no BDP ping outstanding, one is sent.
        if (data && !outstanding) {
          outstanding = true;
          pings += 1;
          client.send(frame(T.PING, 0, 0, Buffer.from([2, 4, 16, 16, 9, 14, 7, 7])));
        }
        done += answered;
        client.frames.length = 0;
        seen = 0;
        if (Date.now() - started > 14_000) {
          resolve("served");
          return;
        }
        for (let i = 0; i < answered; i++) open();
      });
      client.socket.on("close", () => resolve("closed"));
    });
    // Its connection window opened wide, as grpc-go's is.
    client.send(frame(T.WINDOW_UPDATE, 0, 0, u32(2 ** 31 - 1 - 65_535)));
    for (let i = 0; i < 16; i++) open();
    expect(await finished).toBe("served");
    expect(done).toBeGreaterThan(14_000);
    client.close();
  }, 30_000);
});

describe("the cost of a WINDOW_UPDATE", () => {
  it("does not visit every stream waiting on its own window for each WINDOW_UPDATE on the connection", async () => {
    const client = await RawClient.connect(server.port);
    client.send(settings([[4, 0]]));
    const calls: Buffer[] = [];
    for (let i = 0; i < 1000; i++) {
      calls.push(
        frame(T.HEADERS, F.END_HEADERS, 1 + 2 * i, grpcHeaders(ECHO)),
        frame(T.DATA, F.END_STREAM, 1 + 2 * i, grpcMessage(Buffer.from("blocked"))),
      );
    }
    client.send(...calls);
    await client.waitFor((f) => f.type === T.HEADERS && f.stream === 1999, 10_000);
    // 100,000 WINDOW_UPDATEs of 1 on the connection: 1.3 MB, frames no budget counts.
    const update = frame(T.WINDOW_UPDATE, 0, 0, u32(1));
    const batch = Buffer.concat(Array.from({ length: 10_000 }, () => update));
    const started = Date.now();
    for (let i = 0; i < 10; i++) client.send(batch);
    client.send(frame(T.PING, 0, 0, Buffer.from("how long")));
    await client.waitFor((f) => f.type === T.PING && f.payload.toString() === "how long", 60_000);
    const ms = Date.now() - started;
    client.close();
    // Each frame is a few µs of work at most: 100,000 of them well under 2 s on a shared machine.
    expect(ms).toBeLessThan(2000);
  }, 90_000);
});

describe("a call that ends after its connection (sound: kept as a regression test)", () => {
  it("answers nothing, throws nothing and counts the call CANCELLED once when its method resolves after the client left", async () => {
    const own = await startTestServer();
    const client = await RawClient.connect(own.port);
    client.send(
      frame(T.HEADERS, F.END_HEADERS, 1, grpcHeaders(HOLD)),
      frame(T.DATA, F.END_STREAM, 1, grpcMessage(Buffer.from("left"))),
    );
    await waitUntil(() => own.held() === 1);
    client.close();
    await waitUntil(() => own.finished.length === 1);
    own.release();
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(own.finished).toEqual(["CANCELLED"]);
    expect(own.errors).toEqual([]);
    await own.close();
  });
});
