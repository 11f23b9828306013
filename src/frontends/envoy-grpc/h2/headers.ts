// HEADERS and CONTINUATION frames (RFC 9113 sections 6.2, 6.10): padding and the priority fields
// stripped, a block gathered across frames within bounds (CONTINUATION floods), decoded always (the
// HPACK table must follow the peer's), then a new stream opened, a request's trailers taken, or the
// frame answered by the stream rules: even or decreasing ids, closed streams, too many streams.
import { ConnectionError } from "./errors.js";
import { ErrorCode, Flag, FrameType, Limits } from "./frames.js";
import { type Decoded, HpackError } from "./hpack.js";
import type { Connection } from "./state.js";
import { H2Stream } from "./state.js";

export function readHeaders(
  c: Connection,
  type: number,
  flags: number,
  id: number,
  buf: Buffer,
  start: number,
  end: number,
): void {
  if (id === 0) throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "a header block on stream 0");
  if (type === FrameType.CONTINUATION) {
    const block = c.block;
    if (block === undefined || block.id !== id) {
      throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "CONTINUATION without its HEADERS");
    }
    block.bytes += end - start;
    block.frames += 1;
    if (block.bytes > Limits.maxHeaderBlockBytes || block.frames > Limits.maxHeaderBlockFrames) {
      throw new ConnectionError(ErrorCode.ENHANCE_YOUR_CALM, "a header block too large");
    }
    block.parts.push(Buffer.from(buf.subarray(start, end)));
    if ((flags & Flag.END_HEADERS) === 0) return;
    c.block = undefined;
    const whole = Buffer.concat(block.parts, block.bytes);
    complete(c, id, block.end, whole, 0, whole.length);
    return;
  }
  let from = start;
  let to = end;
  if (flags & Flag.PADDED) {
    const pad = end > start ? (buf[start] as number) : 0;
    if (end === start || pad >= end - start)
      throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "padding beyond the frame");
    from += 1;
    to -= pad;
  }
  let selfDependent = false;
  if (flags & Flag.PRIORITY) {
    if (to - from < 5)
      throw new ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "HEADERS too short for its priority");
    selfDependent = (buf.readUInt32BE(from) & 0x7fffffff) === id;
    from += 5;
  }
  const endStream = (flags & Flag.END_STREAM) !== 0;
  if ((flags & Flag.END_HEADERS) === 0) {
    c.block = {
      id,
      end: endStream,
      parts: [Buffer.from(buf.subarray(from, to))],
      bytes: to - from,
      frames: 1,
    };
    return;
  }
  if (to === from) c.idleFrame();
  complete(c, id, endStream, buf, from, to, selfDependent);
}

function decode(c: Connection, buf: Buffer, from: number, to: number): Decoded {
  try {
    return c.decoder.decode(buf, from, to);
  } catch (error) {
    if (error instanceof HpackError) throw new ConnectionError(ErrorCode.COMPRESSION_ERROR, error.message);
    throw error;
  }
}

function complete(
  c: Connection,
  id: number,
  endStream: boolean,
  buf: Buffer,
  from: number,
  to: number,
  selfDependent = false,
): void {
  const decoded = decode(c, buf, from, to);
  const open = c.streams.get(id);
  if (open !== undefined) {
    // The request's trailers: they must end the stream, and hold no pseudo-header (section 8.1).
    if (open.remoteEnded) {
      c.streamError(open, ErrorCode.STREAM_CLOSED);
      return;
    }
    if (!endStream || decoded.malformed || decoded.pseudo) {
      c.streamError(open, ErrorCode.PROTOCOL_ERROR);
      return;
    }
    c.remoteEnd(open);
    return;
  }
  if (id <= c.lastStream) {
    c.closedStreamFrame(id);
    return;
  }
  if ((id & 1) === 0) throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "an even stream id from a client");
  c.lastStream = id;
  // After GOAWAY, streams beyond its last id are not taken (the client retries them elsewhere).
  if (c.goawayLast >= 0) return;
  if (selfDependent) {
    refuse(c, id, ErrorCode.PROTOCOL_ERROR);
    return;
  }
  if (c.streams.size >= Limits.maxConcurrentStreams) {
    c.spendReset();
    refuse(c, id, ErrorCode.REFUSED_STREAM);
    return;
  }
  const { headers, tooLarge } = decoded;
  const incomplete =
    headers[":method"] === undefined || headers[":scheme"] === undefined || !headers[":path"];
  if (!tooLarge && (decoded.malformed || incomplete)) {
    // A malformed request (sections 8.1.1, 8.2, 8.3.1): a stream error, the connection goes on.
    refuse(c, id, ErrorCode.PROTOCOL_ERROR);
    return;
  }
  const stream = new H2Stream(c, id, headers, c.peerInitialWindow, Limits.streamWindow);
  stream.tooLarge = tooLarge;
  stream.remoteEnded = endStream;
  c.streams.add(stream);
  c.seen = c.clock.seconds;
  c.streamOpened();
  c.handler.open(stream);
  if (endStream && !stream.closed) c.handler.end(stream);
}

function refuse(c: Connection, id: number, code: number): void {
  c.writer.rstStream(id, code);
  c.noteReset(id);
}
