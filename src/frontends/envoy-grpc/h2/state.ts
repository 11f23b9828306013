// What the frame handlers (dispatch, headers, control, send) see of a connection, apart from its
// class (connection.ts), so that they and the class that calls them do not import each other; and
// one stream as the server holds it (RFC 9113 section 5.1, server side): its request headers,
// which halves have ended, its two flow-control windows, the answer bytes waiting for the peer's
// window, and the application's own object for the call.
import type { Socket } from "node:net";
import type { Clock } from "./budget.js";
import type { HeaderList, HpackDecoder } from "./hpack.js";
import type { FrameWriter } from "./output.js";
import type { StreamTable } from "./stream-table.js";

export type StreamHandler = {
  /** A stream's request headers have arrived. */
  open(stream: H2Stream): void;
  /**
   * A DATA payload: a view of the socket read it came in, valid as it is until this read is done
   * (`last`: the client's half ends with it, so the request is whole within this read).
   */
  data(stream: H2Stream, chunk: Buffer, last: boolean): void;
  /** The client ended its half of the stream. */
  end(stream: H2Stream): void;
  /** The stream is gone, once: `cancelled` when it was reset or its connection ended before the server's answer. */
  close(stream: H2Stream, cancelled: boolean): void;
  /** An unexpected failure while a frame was handled: the connection ends with INTERNAL_ERROR. */
  error(error: unknown): void;
};

export type Connection = {
  readonly socket: Socket;
  readonly handler: StreamHandler;
  readonly clock: Clock;
  readonly peer: string | undefined;
  readonly streams: StreamTable<H2Stream>;
  readonly writer: FrameWriter;
  readonly decoder: HpackDecoder;
  /** Streams with answer bytes waiting for the connection's window (not for their own). */
  readonly blocked: Set<H2Stream>;
  /** Streams with answer bytes waiting for either window (the sweep resets those that never move). */
  readonly waiting: Set<H2Stream>;
  /** Stream ids the server reset, kept a while: frames the peer sent meanwhile are ignored. */
  readonly resetByUs: Set<number>;
  /** The highest stream id the client has opened. */
  lastStream: number;
  sendWindow: number;
  peerInitialWindow: number;
  peerMaxFrame: number;
  /** What the peer may still send on the connection, and what it sent since the last WINDOW_UPDATE. */
  recvWindow: number;
  recvUnacked: number;
  /** Second of the last stream opened (the server's idle sweep). */
  seen: number;
  /** The last stream id of the GOAWAY sent or received, -1 before any: no stream after it is taken. */
  goawayLast: number;
  /** The client's first SETTINGS has arrived. */
  settled: boolean;
  /** A header block still arriving in CONTINUATION frames. */
  block: { id: number; end: boolean; parts: Buffer[]; bytes: number; frames: number } | undefined;
  /** A frame for a stream that is not open: idle (never opened) or closed. */
  closedStreamFrame(id: number): void;
  spendReset(): void;
  idleFrame(): void;
  streamOpened(): void;
  remoteEnd(stream: H2Stream): void;
  localEnd(stream: H2Stream): void;
  resetStream(stream: H2Stream, code: number): void;
  /** A stream error the peer caused: reset, within the reset budget (else a connection error). */
  streamError(stream: H2Stream, code: number): void;
  noteReset(id: number): void;
  closeStream(stream: H2Stream, cancelled: boolean): void;
};

export class H2Stream {
  /** The client ended its half (END_STREAM received): half-closed (remote). */
  remoteEnded = false;
  /** The server ended its half, or reset the stream. */
  localEnded = false;
  /** Gone from its connection (both halves ended, or reset by either side). */
  closed = false;
  headersSent = false;
  /** The request's header list was over SETTINGS_MAX_HEADER_LIST_SIZE: `headers` is empty. */
  tooLarge = false;
  /** What the peer lets us send on this stream. */
  sendWindow: number;
  /** What the peer may still send before a WINDOW_UPDATE. */
  recvWindow: number;
  /** DATA payloads waiting for window, in order; `queued` counts their bytes. */
  queue: Buffer[] | undefined;
  queued = 0;
  /** After the queue: the trailers block to send, or an empty DATA with END_STREAM. */
  queuedTrailers: Buffer | undefined;
  queuedEnd = false;
  /** The second its waiting answer bytes last moved, or began to wait. */
  movedAt = 0;
  /** The application's object for this stream (a gRPC call). */
  call: unknown;

  constructor(
    readonly connection: Connection,
    readonly id: number,
    readonly headers: HeaderList,
    sendWindow: number,
    recvWindow: number,
  ) {
    this.sendWindow = sendWindow;
    this.recvWindow = recvWindow;
  }
}
