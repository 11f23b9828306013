// A raw HTTP/2 client for tests of tollgate's own HTTP/2 server: frames written byte by byte as a
// test chooses them (well-formed or not), and the server's frames read back, so that the server's
// answers to every protocol rule and abuse bound can be checked without a library in between.
import * as net from "node:net";
import { HpackDecoder } from "../../src/frontends/envoy-grpc/h2/hpack.js";

export const PREFACE = Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "latin1");
export const T = {
  DATA: 0,
  HEADERS: 1,
  PRIORITY: 2,
  RST_STREAM: 3,
  SETTINGS: 4,
  PUSH_PROMISE: 5,
  PING: 6,
  GOAWAY: 7,
  WINDOW_UPDATE: 8,
  CONTINUATION: 9,
} as const;
export const F = { END_STREAM: 1, ACK: 1, END_HEADERS: 4, PADDED: 8, PRIORITY: 0x20 } as const;
export const E = {
  NO_ERROR: 0,
  PROTOCOL_ERROR: 1,
  FLOW_CONTROL_ERROR: 3,
  STREAM_CLOSED: 5,
  FRAME_SIZE_ERROR: 6,
  REFUSED_STREAM: 7,
  CANCEL: 8,
  COMPRESSION_ERROR: 9,
  ENHANCE_YOUR_CALM: 11,
} as const;

export type Frame = { type: number; flags: number; stream: number; payload: Buffer };

export function frame(
  type: number,
  flags: number,
  stream: number,
  payload: Buffer = Buffer.alloc(0),
): Buffer {
  const head = Buffer.alloc(9);
  head.writeUIntBE(payload.length, 0, 3);
  head[3] = type;
  head[4] = flags;
  head.writeUInt32BE(stream, 5);
  return Buffer.concat([head, payload]);
}

export function settings(pairs: [number, number][] = []): Buffer {
  const payload = Buffer.alloc(pairs.length * 6);
  pairs.forEach(([id, value], i) => {
    payload.writeUInt16BE(id, i * 6);
    payload.writeUInt32BE(value, i * 6 + 2);
  });
  return frame(T.SETTINGS, 0, 0, payload);
}

export function u32(value: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(value >>> 0);
  return b;
}

/** A literal-without-indexing HPACK field with both name and value spelled (no Huffman). */
function literal(name: string, value: string): Buffer {
  const n = Buffer.from(name, "latin1");
  const v = Buffer.from(value, "latin1");
  if (n.length > 126 || v.length > 126) return longLiteral(n, v);
  return Buffer.concat([Buffer.from([0, n.length]), n, Buffer.from([v.length]), v]);
}

function length7(n: number): Buffer {
  if (n < 127) return Buffer.from([n]);
  const out = [127];
  let rest = n - 127;
  while (rest >= 128) {
    out.push((rest % 128) + 128);
    rest = Math.floor(rest / 128);
  }
  out.push(rest);
  return Buffer.from(out);
}

function longLiteral(n: Buffer, v: Buffer): Buffer {
  return Buffer.concat([Buffer.from([0]), length7(n.length), n, length7(v.length), v]);
}

/** A request header block for a gRPC call to `path`, plus any extra fields. */
export function grpcHeaders(path: string, extra: [string, string][] = []): Buffer {
  return Buffer.concat(
    [
      [":method", "POST"],
      [":scheme", "http"],
      [":path", path],
      [":authority", "localhost"],
      ["content-type", "application/grpc"],
      ["te", "trailers"],
      ...extra,
    ].map(([name, value]) => literal(name as string, value as string)),
  );
}

/** A gRPC message with its 5-byte prefix. */
export function grpcMessage(message: Uint8Array): Buffer {
  const prefix = Buffer.alloc(5);
  prefix.writeUInt32BE(message.length, 1);
  return Buffer.concat([prefix, message]);
}

export class RawClient {
  readonly frames: Frame[] = [];
  closed = false;
  private buffer = Buffer.alloc(0);
  private waiters: (() => void)[] = [];

  private constructor(readonly socket: net.Socket) {
    socket.on("data", (chunk: Buffer) => {
      this.buffer = Buffer.concat([this.buffer, chunk]);
      while (this.buffer.length >= 9) {
        const length = this.buffer.readUIntBE(0, 3);
        if (this.buffer.length < 9 + length) break;
        this.frames.push({
          type: this.buffer[3] as number,
          flags: this.buffer[4] as number,
          stream: this.buffer.readUInt32BE(5) & 0x7fffffff,
          payload: this.buffer.subarray(9, 9 + length),
        });
        this.buffer = this.buffer.subarray(9 + length);
      }
      this.wake();
    });
    socket.on("error", () => undefined);
    socket.on("close", () => {
      this.closed = true;
      this.wake();
    });
  }

  /** Connects and, unless told not to, sends the preface and an empty SETTINGS. */
  static async connect(port: number, options: { preface?: boolean } = {}): Promise<RawClient> {
    const socket = net.connect(port, "127.0.0.1");
    await new Promise<void>((resolve, reject) => {
      socket.once("connect", resolve);
      socket.once("error", reject);
    });
    const client = new RawClient(socket);
    if (options.preface !== false) client.send(PREFACE, settings());
    return client;
  }

  send(...chunks: Buffer[]): void {
    if (!this.socket.destroyed) this.socket.write(Buffer.concat(chunks));
  }

  private wake(): void {
    for (const waiter of this.waiters.splice(0)) waiter();
  }

  /** Resolves with the first frame (from `from` on) that matches, or rejects after `ms`. */
  async waitFor(match: (f: Frame) => boolean, ms = 3000, from = 0): Promise<Frame> {
    const deadline = Date.now() + ms;
    for (;;) {
      const found = this.frames.slice(from).find(match);
      if (found !== undefined) return found;
      if (this.closed) throw new Error("connection closed before the frame arrived");
      const left = deadline - Date.now();
      if (left <= 0) throw new Error("timed out waiting for a frame");
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        this.waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
  }

  /** The GOAWAY's error code once the server sends one. */
  async goaway(ms = 3000): Promise<number> {
    const f = await this.waitFor((x) => x.type === T.GOAWAY, ms);
    return f.payload.readUInt32BE(4);
  }

  /** The RST_STREAM code the server sent on this stream. */
  async reset(stream: number, ms = 3000): Promise<number> {
    const f = await this.waitFor((x) => x.type === T.RST_STREAM && x.stream === stream, ms);
    return f.payload.readUInt32BE(0);
  }

  /** Resolves once the server has closed the connection. */
  async closedBy(ms = 3000): Promise<void> {
    const deadline = Date.now() + ms;
    while (!this.closed) {
      if (Date.now() > deadline) throw new Error("the server did not close the connection");
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, 50);
        this.waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
  }

  close(): void {
    this.socket.destroy();
  }
}

/** Each HEADERS block the server sent on a stream, decoded (its blocks use no dynamic table). */
export function headersOn(client: RawClient, stream: number): Record<string, string>[] {
  return client.frames
    .filter((f) => f.type === T.HEADERS && f.stream === stream)
    .map((f) => new HpackDecoder(4096, 65536).decode(f.payload).headers);
}
