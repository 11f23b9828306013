// One server-side HTTP/2 connection (RFC 9113): the preface, frames read from the socket and
// dispatched, the stream states and their rules, the receive windows credited as data arrives, and
// any connection error answered with GOAWAY and the end of the connection. What an application
// does with a stream goes through a StreamHandler; its answers through send.ts.
import type { Socket } from "node:net";
import { Budget, type Clock } from "./budget.js";
import { dispatchFrame } from "./dispatch.js";
import { ConnectionError } from "./errors.js";
import {
  DEFAULT_MAX_FRAME,
  DEFAULT_WINDOW,
  ErrorCode,
  FRAME_HEADER_BYTES,
  FrameType,
  Limits,
  PREFACE,
  Setting,
} from "./frames.js";
import { HpackDecoder } from "./hpack.js";
import { FrameWriter } from "./output.js";
import type { Connection, H2Stream, StreamHandler } from "./state.js";
import { StreamTable } from "./stream-table.js";

/** Stream ids the server reset, kept a while: frames the peer sent meanwhile are ignored (section 5.1). */
const RECENT_RESETS = 1024;
/** After GOAWAY for an error, how long the peer has to close before the socket is destroyed. */
const CLOSE_GRACE_MS = 1000;

export class H2Connection implements Connection {
  readonly streams = new StreamTable<H2Stream>();
  readonly writer: FrameWriter;
  readonly decoder = new HpackDecoder(Limits.headerTableSize, Limits.maxHeaderListSize);
  /** Streams with answer bytes waiting for the connection's window (not for their own). */
  readonly blocked = new Set<H2Stream>();
  readonly waiting = new Set<H2Stream>();
  /** The highest stream id the client has opened. */
  lastStream = 0;
  sendWindow = DEFAULT_WINDOW;
  peerInitialWindow = DEFAULT_WINDOW;
  peerMaxFrame = DEFAULT_MAX_FRAME;
  /** Second of the last stream opened (the server's idle sweep). */
  seen: number;
  /** The GOAWAY sent (a drain, or an error): no stream after `goawayLast` is taken. */
  goawayLast = -1;
  dead = false;
  /** The preface has arrived, and the client's first SETTINGS. */
  prefaced = false;
  settled = false;

  /** What the peer may still send on the connection, and what it sent since the last WINDOW_UPDATE. */
  recvWindow: number = Limits.connectionWindow;
  recvUnacked = 0;
  /** Bytes of an incomplete frame, and how many the next step needs. */
  private pending: Buffer[] | undefined;
  private pendingBytes = 0;
  private need = PREFACE.length;
  /** A header block still arriving in CONTINUATION frames. */
  block: { id: number; end: boolean; parts: Buffer[]; bytes: number; frames: number } | undefined;
  private readonly resets: Budget;
  private readonly idle: Budget;
  readonly resetByUs = new Set<number>();

  constructor(
    readonly socket: Socket,
    readonly handler: StreamHandler,
    readonly clock: Clock,
    /** The connection's peer address, read once. */
    readonly peer: string | undefined,
  ) {
    this.seen = clock.seconds;
    this.resets = new Budget(clock, Limits.resetBurst, Limits.resetsPerSecond);
    this.idle = new Budget(clock, Limits.idleFrameBurst, Limits.idleFramesPerSecond);
    this.writer = new FrameWriter(socket, () => this.destroy());
    const settings = Buffer.allocUnsafe(24);
    const pairs = [
      [Setting.MAX_CONCURRENT_STREAMS, Limits.maxConcurrentStreams],
      [Setting.INITIAL_WINDOW_SIZE, Limits.streamWindow],
      [Setting.HEADER_TABLE_SIZE, Limits.headerTableSize],
      [Setting.MAX_HEADER_LIST_SIZE, Limits.maxHeaderListSize],
    ] as const;
    pairs.forEach(([id, value], i) => {
      settings.writeUInt16BE(id, i * 6);
      settings.writeUInt32BE(value, i * 6 + 2);
    });
    this.writer.frame(FrameType.SETTINGS, 0, 0, settings);
    this.writer.windowUpdate(0, Limits.connectionWindow - DEFAULT_WINDOW);
    socket.on("data", (chunk: Buffer) => this.read(chunk));
    socket.on("error", () => this.destroy());
    socket.on("close", () => this.closed());
  }

  private read(chunk: Buffer): void {
    if (this.dead) return;
    let buf = chunk;
    if (this.pending !== undefined) {
      this.pending.push(chunk);
      this.pendingBytes += chunk.length;
      if (this.pendingBytes < this.need) return;
      buf = Buffer.concat(this.pending, this.pendingBytes);
      this.pending = undefined;
    }
    let pos = 0;
    try {
      if (!this.prefaced) {
        if (buf.length < PREFACE.length) {
          if (!PREFACE.subarray(0, buf.length).equals(buf))
            throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "no preface");
          this.keep(buf, PREFACE.length);
          return;
        }
        if (!PREFACE.equals(buf.subarray(0, PREFACE.length))) {
          throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "no preface");
        }
        this.prefaced = true;
        pos = PREFACE.length;
      }
      for (;;) {
        const available = buf.length - pos;
        if (available < FRAME_HEADER_BYTES) {
          if (available > 0) this.keep(buf.subarray(pos), FRAME_HEADER_BYTES);
          return;
        }
        const length =
          ((buf[pos] as number) << 16) | ((buf[pos + 1] as number) << 8) | (buf[pos + 2] as number);
        // The server never raises SETTINGS_MAX_FRAME_SIZE above its default.
        if (length > DEFAULT_MAX_FRAME)
          throw new ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "a frame over 16384 bytes");
        if (available < FRAME_HEADER_BYTES + length) {
          this.keep(buf.subarray(pos), FRAME_HEADER_BYTES + length);
          return;
        }
        const type = buf[pos + 3] as number;
        const flags = buf[pos + 4] as number;
        const id = buf.readUInt32BE(pos + 5) & 0x7fffffff;
        const start = pos + FRAME_HEADER_BYTES;
        pos = start + length;
        dispatchFrame(this, type, flags, id, buf, start, pos);
        if (this.dead) return;
      }
    } catch (error) {
      if (error instanceof ConnectionError) {
        this.fail(error.code);
        return;
      }
      // A fault of the server's own (never the peer's bytes, which end in a ConnectionError) ends this
      // connection, not the process.
      this.handler.error(error);
      this.fail(ErrorCode.INTERNAL_ERROR);
    }
  }

  private keep(rest: Buffer, need: number): void {
    this.pending = [rest];
    this.pendingBytes = rest.length;
    this.need = need;
  }

  /** A frame for a stream that is not open: idle (never opened) or closed. */
  closedStreamFrame(id: number): void {
    // Streams opened after the server's GOAWAY were never taken: their frames are ignored (section 6.8).
    if (this.goawayLast >= 0 && id > this.goawayLast && id <= this.lastStream) return;
    if (id > this.lastStream) {
      throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "a frame on an idle stream");
    }
    // Frames the peer sent before it saw the server's RST_STREAM are ignored (section 5.1, closed),
    // within the budget of frames without work: a peer cannot keep sending on a reset stream.
    if (this.resetByUs.has(id)) {
      this.idleFrame();
      return;
    }
    throw new ConnectionError(ErrorCode.STREAM_CLOSED, "a frame on a closed stream");
  }

  /** A client reset or a refused stream: beyond the budget, the connection is abusive ("rapid reset"). */
  spendReset(): void {
    if (!this.resets.spend()) throw new ConnectionError(ErrorCode.ENHANCE_YOUR_CALM, "too many resets");
  }

  /**
   * A stream opened: it pays for one frame without work. Clients send PINGs with their calls
   * (grpc-go estimates bandwidth with a PING per read of answers: thousands a
   * second under load); the budget is for PINGs and the like beyond the calls they come with.
   */
  streamOpened(): void {
    this.idle.refund();
  }

  idleFrame(): void {
    if (!this.idle.spend())
      throw new ConnectionError(ErrorCode.ENHANCE_YOUR_CALM, "too many frames without work");
  }

  remoteEnd(stream: H2Stream): void {
    stream.remoteEnded = true;
    if (stream.localEnded) this.closeStream(stream, false);
    else this.handler.end(stream);
  }

  /** The server has ended its half: the stream closes, with RST_STREAM NO_ERROR when the client's half is still open. */
  localEnd(stream: H2Stream): void {
    stream.localEnded = true;
    if (stream.remoteEnded) {
      this.closeStream(stream, false);
      return;
    }
    this.writer.rstStream(stream.id, ErrorCode.NO_ERROR);
    this.noteReset(stream.id);
    this.closeStream(stream, false);
  }

  /**
   * A stream error the peer's frames caused (DATA after END_STREAM, a zero WINDOW_UPDATE…): it closes
   * the stream as a client reset does while the call's work may go on, so it spends the same budget
   * ("MadeYouReset", CVE-2025-8671).
   */
  streamError(stream: H2Stream, code: number): void {
    this.spendReset();
    this.resetStream(stream, code);
  }

  resetStream(stream: H2Stream, code: number): void {
    if (stream.closed) return;
    stream.localEnded = true;
    this.writer.rstStream(stream.id, code);
    this.noteReset(stream.id);
    this.closeStream(stream, true);
  }

  noteReset(id: number): void {
    // The oldest goes, never the whole set: the peer may still be sending on the last ones reset.
    if (this.resetByUs.size >= RECENT_RESETS) {
      const oldest = this.resetByUs.values().next().value;
      if (oldest !== undefined) this.resetByUs.delete(oldest);
    }
    this.resetByUs.add(id);
  }

  closeStream(stream: H2Stream, cancelled: boolean): void {
    if (stream.closed) return;
    stream.closed = true;
    stream.queue = undefined;
    this.streams.delete(stream.id);
    this.blocked.delete(stream);
    this.waiting.delete(stream);
    this.handler.close(stream, cancelled);
    if (this.goawayLast >= 0 && this.streams.size === 0 && !this.dead) {
      this.writer.flush();
      this.socket.end();
    }
  }

  /** Resets each stream whose answer has waited for the peer's windows without moving since `before`. */
  resetStalled(before: number): void {
    for (const stream of this.waiting) {
      if (stream.movedAt <= before) this.resetStream(stream, ErrorCode.CANCEL);
    }
  }

  /** A graceful GOAWAY: the streams open are answered, none after them is taken, then the connection closes. */
  drain(): void {
    if (this.dead || this.goawayLast >= 0) return;
    this.goawayLast = this.lastStream;
    this.writer.goaway(this.lastStream, ErrorCode.NO_ERROR);
    this.writer.flush();
    if (this.streams.size === 0) this.socket.end();
  }

  /** A connection error: GOAWAY with its code, every stream cancelled, the connection closed. */
  fail(code: number): void {
    if (this.dead) return;
    // A GOAWAY never raises the last stream id of one sent before (section 6.8).
    this.writer.goaway(this.goawayLast >= 0 ? this.goawayLast : this.lastStream, code);
    this.writer.flush();
    this.writer.closed = true;
    this.dead = true;
    this.socket.end();
    setTimeout(() => this.socket.destroy(), CLOSE_GRACE_MS).unref();
    this.closeAll();
  }

  destroy(): void {
    this.socket.destroy();
    this.closed();
  }

  private closed(): void {
    this.dead = true;
    this.writer.closed = true;
    this.pending = undefined;
    this.closeAll();
  }

  private closeAll(): void {
    for (const stream of this.streams.values()) this.closeStream(stream, true);
  }
}
