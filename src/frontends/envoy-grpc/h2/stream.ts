// One HTTP/2 stream as the server holds it (RFC 9113 section 5.1, server side): its request headers,
// which halves have ended, its two flow-control windows, the answer bytes waiting for the peer's
// window, and the application's own object for the call.
import type { H2Connection } from "./connection.js";
import type { HeaderList } from "./hpack.js";

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
  /** The application's object for this stream (a gRPC call). */
  call: unknown;

  constructor(
    readonly connection: H2Connection,
    readonly id: number,
    readonly headers: HeaderList,
    sendWindow: number,
    recvWindow: number,
  ) {
    this.sendWindow = sendWindow;
    this.recvWindow = recvWindow;
  }
}
