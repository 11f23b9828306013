// A connection's outgoing frames: written into one growing buffer as they are made and handed to the
// socket in one write once the current callback and its promise jobs are done (process.nextTick:
// measured against setImmediate, the same calls/s and latency, less CPU per call), so that the
// answers of one read of many requests, or of one Redis reply, cost one syscall, and a unary
// answer's three frames never leave apart.
import type { Socket } from "node:net";
import { FRAME_HEADER_BYTES, FrameType, Limits } from "./frames.js";

/** Room for a few dozen answers: an idle connection holds one such buffer. */
const ARENA_BYTES = 16 * 1024;

export class FrameWriter {
  private arena = Buffer.allocUnsafe(ARENA_BYTES);
  /** The arena's bytes before `start` were handed to the socket; `start..pos` wait for the flush. */
  private start = 0;
  private pos = 0;
  /** Full arenas waiting for the flush, in order. */
  private full: Buffer[] | undefined;
  private scheduled = false;
  closed = false;

  constructor(
    private readonly socket: Socket,
    /** Called when the peer has not taken what was written (it does not read): the connection is cut. */
    private readonly onOverflow: () => void,
  ) {}

  /** Room for `bytes` more; returns the offset in `this.buf` where they go. */
  reserve(bytes: number): Buffer {
    if (this.pos + bytes > this.arena.length) {
      if (this.pos > this.start) {
        this.full ??= [];
        this.full.push(this.arena.subarray(this.start, this.pos));
      }
      this.arena = Buffer.allocUnsafe(Math.max(ARENA_BYTES, bytes));
      this.start = 0;
      this.pos = 0;
    }
    if (!this.scheduled) {
      this.scheduled = true;
      process.nextTick(flushWriter, this);
    }
    return this.arena;
  }

  /** Writes a frame header at the current offset and moves past it. */
  header(buf: Buffer, length: number, type: number, flags: number, stream: number): void {
    let at = this.pos;
    buf[at++] = (length >>> 16) & 0xff;
    buf[at++] = (length >>> 8) & 0xff;
    buf[at++] = length & 0xff;
    buf[at++] = type;
    buf[at++] = flags;
    buf.writeUInt32BE(stream, at);
    this.pos = at + 4;
  }

  /** Copies bytes at the current offset. */
  bytes(buf: Buffer, source: Uint8Array, from = 0, to = source.length): void {
    buf.set(from === 0 && to === source.length ? source : source.subarray(from, to), this.pos);
    this.pos += to - from;
  }

  /** gRPC's 5-byte message prefix: uncompressed, then the length. */
  prefix(buf: Buffer, length: number): void {
    buf[this.pos] = 0;
    buf.writeUInt32BE(length, this.pos + 1);
    this.pos += 5;
  }

  u32(buf: Buffer, value: number): void {
    buf.writeUInt32BE(value, this.pos);
    this.pos += 4;
  }

  /** A frame whose payload is `payload` whole. */
  frame(type: number, flags: number, stream: number, payload?: Uint8Array): void {
    const length = payload?.length ?? 0;
    const buf = this.reserve(FRAME_HEADER_BYTES + length);
    this.header(buf, length, type, flags, stream);
    if (payload !== undefined) this.bytes(buf, payload);
  }

  rstStream(stream: number, code: number): void {
    const buf = this.reserve(FRAME_HEADER_BYTES + 4);
    this.header(buf, 4, FrameType.RST_STREAM, 0, stream);
    this.u32(buf, code);
  }

  windowUpdate(stream: number, increment: number): void {
    const buf = this.reserve(FRAME_HEADER_BYTES + 4);
    this.header(buf, 4, FrameType.WINDOW_UPDATE, 0, stream);
    this.u32(buf, increment);
  }

  goaway(lastStream: number, code: number): void {
    const buf = this.reserve(FRAME_HEADER_BYTES + 8);
    this.header(buf, 8, FrameType.GOAWAY, 0, 0);
    this.u32(buf, lastStream);
    this.u32(buf, code);
  }

  /** Hands what is waiting to the socket now. */
  flush(): void {
    this.scheduled = false;
    if (this.closed) return;
    const { socket } = this;
    if (socket.destroyed) return;
    let chunk: Buffer | undefined;
    if (this.full !== undefined) {
      if (this.pos > this.start) this.full.push(this.arena.subarray(this.start, this.pos));
      chunk = Buffer.concat(this.full);
      this.full = undefined;
    } else if (this.pos > this.start) {
      chunk = this.arena.subarray(this.start, this.pos);
    }
    this.start = this.pos;
    if (chunk === undefined) return;
    // The arena's written part now belongs to the socket: later frames go after it, never over it.
    socket.write(chunk);
    if (socket.writableLength > Limits.maxUnsentBytes) this.onOverflow();
  }
}

function flushWriter(writer: FrameWriter): void {
  writer.flush();
}
