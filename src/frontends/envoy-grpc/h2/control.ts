// The connection-level frames (RFC 9113 sections 6.5, 6.7, 6.8, 6.9): SETTINGS validated and
// acknowledged, PING answered, the peer's GOAWAY noted, WINDOW_UPDATE crediting the send windows.
import { ConnectionError } from "./errors.js";
import { ErrorCode, Flag, FrameType, MAX_WINDOW, Setting, validMaxFrameSize } from "./frames.js";
import { pump } from "./send.js";
import type { Connection } from "./state.js";

export function onSettings(
  c: Connection,
  flags: number,
  id: number,
  buf: Buffer,
  start: number,
  end: number,
): void {
  if (id !== 0) throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "SETTINGS on a stream");
  const length = end - start;
  if (flags & Flag.ACK) {
    if (length !== 0) throw new ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "SETTINGS ACK with a payload");
    return;
  }
  if (length % 6 !== 0) throw new ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "SETTINGS of a bad length");
  // INITIAL_WINDOW_SIZE is applied to the open streams once per frame, not once per entry: a frame
  // holds up to 2,730 entries, and each pass visits up to 1,000 streams (measured: 20 such frames
  // held the event loop 0.7 s).
  let initial: number | undefined;
  let highest = 0;
  for (let at = start; at < end; at += 6) {
    const setting = buf.readUInt16BE(at);
    const value = buf.readUInt32BE(at + 2);
    if (setting === Setting.ENABLE_PUSH) {
      if (value > 1) throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "ENABLE_PUSH not 0 or 1");
    } else if (setting === Setting.INITIAL_WINDOW_SIZE) {
      if (value > MAX_WINDOW)
        throw new ConnectionError(ErrorCode.FLOW_CONTROL_ERROR, "INITIAL_WINDOW_SIZE too large");
      initial = value;
      highest = Math.max(highest, value);
    } else if (setting === Setting.MAX_FRAME_SIZE) {
      if (!validMaxFrameSize(value))
        throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "MAX_FRAME_SIZE out of range");
      c.peerMaxFrame = value;
    }
    // HEADER_TABLE_SIZE: the server's encoder uses no dynamic table. MAX_CONCURRENT_STREAMS: no push.
    // MAX_HEADER_LIST_SIZE: answers are small. Unknown settings are ignored (section 6.5.2).
  }
  const widened = initial !== undefined && initialWindow(c, initial, highest);
  c.writer.frame(FrameType.SETTINGS, Flag.ACK, 0);
  // Every stream's window grew: each with answer bytes waiting may send (SETTINGS are budgeted).
  if (widened) {
    for (const stream of c.streams.values()) {
      if (stream.queue === undefined) continue;
      c.blocked.delete(stream);
      pump(c, stream);
    }
  }
}

/**
 * A frame's INITIAL_WINDOW_SIZE (its last value) applied to every open stream's send window (RFC 9113
 * section 6.9.2); a window is checked against the highest value the frame passed through, as the
 * entries applied one by one would be. True when the windows grew.
 */
function initialWindow(c: Connection, value: number, highest: number): boolean {
  const delta = value - c.peerInitialWindow;
  const peak = highest - c.peerInitialWindow;
  c.peerInitialWindow = value;
  if (delta === 0 && peak <= 0) return false;
  for (const stream of c.streams.values()) {
    if (stream.sendWindow + peak > MAX_WINDOW) {
      throw new ConnectionError(ErrorCode.FLOW_CONTROL_ERROR, "a stream window beyond 2^31-1");
    }
    stream.sendWindow += delta;
  }
  return delta > 0;
}

export function onPing(
  c: Connection,
  flags: number,
  id: number,
  buf: Buffer,
  start: number,
  end: number,
): void {
  if (id !== 0) throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "PING on a stream");
  if (end - start !== 8) throw new ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "PING of a bad length");
  if (flags & Flag.ACK) return;
  c.writer.frame(FrameType.PING, Flag.ACK, 0, buf.subarray(start, end));
}

export function onWindowUpdate(c: Connection, id: number, buf: Buffer, start: number, end: number): void {
  if (end - start !== 4)
    throw new ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "WINDOW_UPDATE of a bad length");
  const increment = buf.readUInt32BE(start) & 0x7fffffff;
  if (id === 0) {
    if (increment === 0) throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "a WINDOW_UPDATE of 0");
    c.sendWindow += increment;
    if (c.sendWindow > MAX_WINDOW)
      throw new ConnectionError(ErrorCode.FLOW_CONTROL_ERROR, "a window beyond 2^31-1");
    pumpBlocked(c);
    return;
  }
  const stream = c.streams.get(id);
  if (stream === undefined) {
    if (id > c.lastStream)
      throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "WINDOW_UPDATE on an idle stream");
    c.idleFrame();
    return;
  }
  if (increment === 0) {
    c.streamError(stream, ErrorCode.PROTOCOL_ERROR);
    return;
  }
  stream.sendWindow += increment;
  if (stream.sendWindow > MAX_WINDOW) {
    c.streamError(stream, ErrorCode.FLOW_CONTROL_ERROR);
    return;
  }
  if (stream.queue !== undefined) pump(c, stream);
}

function pumpBlocked(c: Connection): void {
  // Each stream waiting at the start is visited once: one the window holds back again is put back
  // at the end of the set, and is not visited a second time.
  let left = c.blocked.size;
  for (const stream of c.blocked) {
    if (left-- === 0 || c.sendWindow <= 0) return;
    c.blocked.delete(stream);
    pump(c, stream);
  }
}
