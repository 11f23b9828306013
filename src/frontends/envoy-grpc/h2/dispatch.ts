// A frame read from a connection, dispatched by type (RFC 9113 section 6): DATA with its padding and
// both receive windows, RST_STREAM within the reset budget, PRIORITY and unknown types ignored
// within the budget of frames without work; header blocks, SETTINGS, PING and WINDOW_UPDATE to
// their own files.
import { onPing, onSettings, onWindowUpdate } from "./control.js";
import { ConnectionError } from "./errors.js";
import { ErrorCode, Flag, FrameType, Limits } from "./frames.js";
import { readHeaders } from "./headers.js";
import type { Connection } from "./state.js";

export function dispatchFrame(
  c: Connection,
  type: number,
  flags: number,
  id: number,
  buf: Buffer,
  start: number,
  end: number,
): void {
  if (c.block !== undefined && type !== FrameType.CONTINUATION) {
    throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "a frame inside a header block");
  }
  if (!c.settled) {
    if (type !== FrameType.SETTINGS || flags & Flag.ACK) {
      throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "the first frame is not SETTINGS");
    }
    c.settled = true;
  }
  switch (type) {
    case FrameType.DATA:
      onData(c, flags, id, buf, start, end);
      break;
    case FrameType.HEADERS:
    case FrameType.CONTINUATION:
      readHeaders(c, type, flags, id, buf, start, end);
      break;
    case FrameType.PRIORITY:
      if (id === 0) throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "PRIORITY on stream 0");
      if (end - start !== 5)
        throw new ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "PRIORITY of a bad length");
      c.idleFrame();
      break;
    case FrameType.RST_STREAM:
      onReset(c, id, start, end);
      break;
    case FrameType.SETTINGS:
      c.idleFrame();
      onSettings(c, flags, id, buf, start, end);
      break;
    case FrameType.PING:
      c.idleFrame();
      onPing(c, flags, id, buf, start, end);
      break;
    case FrameType.GOAWAY:
      if (id !== 0) throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "GOAWAY on a stream");
      // The client leaves: its calls in flight are answered, then the connection closes.
      if (c.goawayLast < 0) c.goawayLast = c.lastStream;
      if (c.streams.size === 0) {
        // What this read already answered (a call, SETTINGS ACK, PING ACK) goes out before the FIN.
        c.writer.flush();
        c.socket.end();
      }
      break;
    case FrameType.WINDOW_UPDATE:
      onWindowUpdate(c, id, buf, start, end);
      break;
    case FrameType.PUSH_PROMISE:
      throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "PUSH_PROMISE from a client");
    default:
      // Unknown frame types are ignored (section 4.1), within the budget of frames that carry no work.
      c.idleFrame();
  }
}

function onData(c: Connection, flags: number, id: number, buf: Buffer, start: number, end: number): void {
  if (id === 0) throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "DATA on stream 0");
  const length = end - start;
  if (length > c.recvWindow)
    throw new ConnectionError(ErrorCode.FLOW_CONTROL_ERROR, "DATA beyond the window");
  // The connection's window is credited as data arrives: what a call holds is bounded by the
  // gRPC layer's per-connection byte budget, not by making the client wait.
  c.recvWindow -= length;
  c.recvUnacked += length;
  if (c.recvUnacked >= Limits.connectionWindow / 2) {
    c.writer.windowUpdate(0, c.recvUnacked);
    c.recvWindow += c.recvUnacked;
    c.recvUnacked = 0;
  }
  let from = start;
  let to = end;
  if (flags & Flag.PADDED) {
    const pad = length > 0 ? (buf[start] as number) : 0;
    if (length === 0 || pad >= length)
      throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "padding beyond the frame");
    from = start + 1;
    to = end - pad;
  }
  const stream = c.streams.get(id);
  if (stream === undefined) {
    c.closedStreamFrame(id);
    return;
  }
  if (stream.remoteEnded) {
    c.streamError(stream, ErrorCode.STREAM_CLOSED);
    return;
  }
  if (length > stream.recvWindow) {
    c.streamError(stream, ErrorCode.FLOW_CONTROL_ERROR);
    return;
  }
  stream.recvWindow -= length;
  const endStream = (flags & Flag.END_STREAM) !== 0;
  if (to > from) c.handler.data(stream, buf.subarray(from, to), endStream);
  else if (!endStream) c.idleFrame();
  if (stream.closed) return;
  if (endStream) {
    c.remoteEnd(stream);
    return;
  }
  const consumed = Limits.streamWindow - stream.recvWindow;
  if (consumed >= Limits.streamWindow / 2) {
    c.writer.windowUpdate(id, consumed);
    stream.recvWindow += consumed;
  }
}

function onReset(c: Connection, id: number, start: number, end: number): void {
  if (id === 0) throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "RST_STREAM on stream 0");
  if (end - start !== 4) throw new ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "RST_STREAM of a bad length");
  const stream = c.streams.get(id);
  if (stream === undefined) {
    if (id > c.lastStream)
      throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "RST_STREAM on an idle stream");
    c.idleFrame();
    return;
  }
  c.spendReset();
  c.closeStream(stream, true);
}
