// The answer side of a stream: HEADERS, DATA within the peer's flow-control windows (RFC 9113
// section 5.2; what does not fit waits on the stream until WINDOW_UPDATE, within a bound), trailers
// after the last DATA, and a unary answer's three frames written together when the windows allow.
import { ErrorCode, Flag, FRAME_HEADER_BYTES, FrameType, Limits } from "./frames.js";
import type { Connection, H2Stream } from "./state.js";

const PREFIX_BYTES = 5;

/** Response HEADERS (a block that fits one frame: tollgate's are a few hundred bytes at most). */
export function respond(connection: Connection, stream: H2Stream, block: Buffer, end: boolean): void {
  if (stream.localEnded || stream.headersSent) return;
  stream.headersSent = true;
  const flags = end ? Flag.END_HEADERS | Flag.END_STREAM : Flag.END_HEADERS;
  connection.writer.frame(FrameType.HEADERS, flags, stream.id, block);
  if (end) connection.localEnd(stream);
}

/** A DATA payload, sent now as far as the windows allow, the rest queued. */
export function sendData(connection: Connection, stream: H2Stream, payload: Buffer, end: boolean): void {
  if (stream.localEnded || stream.queuedEnd) return;
  const length = payload.length;
  if (
    stream.queue === undefined &&
    length <= connection.sendWindow &&
    length <= stream.sendWindow &&
    length <= connection.peerMaxFrame
  ) {
    connection.sendWindow -= length;
    stream.sendWindow -= length;
    connection.writer.frame(FrameType.DATA, end ? Flag.END_STREAM : 0, stream.id, payload);
    if (end) connection.localEnd(stream);
    return;
  }
  if (stream.queue !== undefined && stream.queued + length > Limits.maxQueuedPerStream) {
    // A peer that never opens its window must not make a stream that keeps writing (Watch) hold
    // its messages without bound. The first payload always waits: it is an answer already made.
    connection.resetStream(stream, ErrorCode.CANCEL);
    return;
  }
  if (stream.queue === undefined) {
    stream.queue = [];
    stream.movedAt = connection.clock.seconds;
    connection.waiting.add(stream);
  }
  stream.queue.push(payload);
  stream.queued += length;
  if (end) stream.queuedEnd = true;
  pump(connection, stream);
}

/** Trailers (END_STREAM): after whatever DATA still waits for window. */
export function sendTrailers(connection: Connection, stream: H2Stream, block: Buffer): void {
  if (stream.localEnded || stream.queuedEnd) return;
  if (stream.queue !== undefined) {
    stream.queuedTrailers = block;
    stream.queuedEnd = true;
    return;
  }
  connection.writer.frame(FrameType.HEADERS, Flag.END_HEADERS | Flag.END_STREAM, stream.id, block);
  connection.localEnd(stream);
}

/**
 * A unary answer: HEADERS, the message as one DATA with its 5-byte gRPC prefix, trailers. In one
 * reservation of the connection's output when the message fits the windows and a frame.
 */
export function sendUnary(
  connection: Connection,
  stream: H2Stream,
  head: Buffer,
  message: Uint8Array,
  prefixed: boolean,
  trailers: Buffer,
): void {
  if (stream.localEnded || stream.headersSent) return;
  const length = prefixed ? message.length : PREFIX_BYTES + message.length;
  if (length > connection.sendWindow || length > stream.sendWindow || length > connection.peerMaxFrame) {
    respond(connection, stream, head, false);
    sendData(connection, stream, prefixed ? Buffer.from(message) : withPrefix(message), false);
    sendTrailers(connection, stream, trailers);
    return;
  }
  stream.headersSent = true;
  connection.sendWindow -= length;
  stream.sendWindow -= length;
  const { writer } = connection;
  const buf = writer.reserve(3 * FRAME_HEADER_BYTES + head.length + length + trailers.length);
  writer.header(buf, head.length, FrameType.HEADERS, Flag.END_HEADERS, stream.id);
  writer.bytes(buf, head);
  writer.header(buf, length, FrameType.DATA, 0, stream.id);
  if (!prefixed) writer.prefix(buf, message.length);
  writer.bytes(buf, message);
  writer.header(buf, trailers.length, FrameType.HEADERS, Flag.END_HEADERS | Flag.END_STREAM, stream.id);
  writer.bytes(buf, trailers);
  connection.localEnd(stream);
}

function withPrefix(message: Uint8Array): Buffer {
  const frame = Buffer.allocUnsafe(PREFIX_BYTES + message.length);
  frame[0] = 0;
  frame.writeUInt32BE(message.length, 1);
  frame.set(message, PREFIX_BYTES);
  return frame;
}

/** Sends what the windows now allow of a stream's queue, then its end once the queue is empty. */
export function pump(connection: Connection, stream: H2Stream): void {
  const queue = stream.queue;
  if (queue === undefined || stream.closed) return;
  const { writer } = connection;
  while (queue.length > 0) {
    const head = queue[0] as Buffer;
    const allowed = Math.min(connection.sendWindow, stream.sendWindow, connection.peerMaxFrame, head.length);
    if (allowed <= 0 && head.length > 0) {
      // Held back by the connection's window: waits with the others for its WINDOW_UPDATE. Held
      // back by its own: waits for the stream's WINDOW_UPDATE (or SETTINGS), and costs nothing meanwhile.
      if (connection.sendWindow <= 0) connection.blocked.add(stream);
      return;
    }
    const last = allowed === head.length;
    const endNow = last && queue.length === 1 && stream.queuedEnd && stream.queuedTrailers === undefined;
    writer.frame(FrameType.DATA, endNow ? Flag.END_STREAM : 0, stream.id, head.subarray(0, allowed));
    stream.movedAt = connection.clock.seconds;
    connection.sendWindow -= allowed;
    stream.sendWindow -= allowed;
    stream.queued -= allowed;
    if (last) queue.shift();
    else queue[0] = head.subarray(allowed);
    if (endNow) {
      stream.queue = undefined;
      connection.waiting.delete(stream);
      connection.localEnd(stream);
      return;
    }
  }
  stream.queue = undefined;
  connection.waiting.delete(stream);
  connection.blocked.delete(stream);
  const trailers = stream.queuedTrailers;
  if (trailers !== undefined) {
    stream.queuedTrailers = undefined;
    connection.writer.frame(FrameType.HEADERS, Flag.END_HEADERS | Flag.END_STREAM, stream.id, trailers);
    connection.localEnd(stream);
  } else if (stream.queuedEnd) {
    connection.writer.frame(FrameType.DATA, Flag.END_STREAM, stream.id);
    connection.localEnd(stream);
  }
}
