// HTTP/2's frame vocabulary (RFC 9113 section 6): types, flags, error codes and settings, and the
// limits tollgate's server announces and holds its peers to.

export const FrameType = {
  DATA: 0x0,
  HEADERS: 0x1,
  PRIORITY: 0x2,
  RST_STREAM: 0x3,
  SETTINGS: 0x4,
  PUSH_PROMISE: 0x5,
  PING: 0x6,
  GOAWAY: 0x7,
  WINDOW_UPDATE: 0x8,
  CONTINUATION: 0x9,
} as const;

export const Flag = { END_STREAM: 0x1, ACK: 0x1, END_HEADERS: 0x4, PADDED: 0x8, PRIORITY: 0x20 } as const;

export const ErrorCode = {
  NO_ERROR: 0x0,
  PROTOCOL_ERROR: 0x1,
  INTERNAL_ERROR: 0x2,
  FLOW_CONTROL_ERROR: 0x3,
  SETTINGS_TIMEOUT: 0x4,
  STREAM_CLOSED: 0x5,
  FRAME_SIZE_ERROR: 0x6,
  REFUSED_STREAM: 0x7,
  CANCEL: 0x8,
  COMPRESSION_ERROR: 0x9,
  CONNECT_ERROR: 0xa,
  ENHANCE_YOUR_CALM: 0xb,
  INADEQUATE_SECURITY: 0xc,
  HTTP_1_1_REQUIRED: 0xd,
} as const;

export const Setting = {
  HEADER_TABLE_SIZE: 0x1,
  ENABLE_PUSH: 0x2,
  MAX_CONCURRENT_STREAMS: 0x3,
  INITIAL_WINDOW_SIZE: 0x4,
  MAX_FRAME_SIZE: 0x5,
  MAX_HEADER_LIST_SIZE: 0x6,
} as const;

export const FRAME_HEADER_BYTES = 9;
export const PREFACE = Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "latin1");
/** RFC 9113's defaults, before a peer's SETTINGS say otherwise. */
export const DEFAULT_WINDOW = 65_535;
export const DEFAULT_MAX_FRAME = 16_384;
export const MAX_WINDOW = 2 ** 31 - 1;
const LARGEST_FRAME = 2 ** 24 - 1;

/** What tollgate's server announces, and the bounds it holds a connection to. */
export const Limits = {
  /**
   * Streams open at once on one connection. Envoy keeps one connection per worker and opens another
   * when a connection's streams are all in use, so this bounds one connection's memory, not throughput.
   */
  maxConcurrentStreams: 1000,
  /** The HPACK table the peer may fill (RFC 9113's default, announced all the same). */
  headerTableSize: 4096,
  /** A request's header list (RFC 9113 counting): a larger one is answered RESOURCE_EXHAUSTED. */
  maxHeaderListSize: 64 * 1024,
  /** A header block's encoded bytes across HEADERS and CONTINUATION frames: beyond, ENHANCE_YOUR_CALM. */
  maxHeaderBlockBytes: 256 * 1024,
  /** A header block's frames (CONTINUATION flood): beyond, ENHANCE_YOUR_CALM. */
  maxHeaderBlockFrames: 64,
  /** Each stream's receive window: a request message of gRPC's default 4 MiB takes a few WINDOW_UPDATEs. */
  streamWindow: 1024 * 1024,
  /** The connection's receive window, announced with a WINDOW_UPDATE at start. */
  connectionWindow: 16 * 1024 * 1024,
  /**
   * Client resets and refused streams a connection may spend in a burst, and the refill per second
   * (CVE-2023-44487, "rapid reset"): beyond, GOAWAY ENHANCE_YOUR_CALM.
   */
  resetBurst: 1000,
  resetsPerSecond: 100,
  /** Frames that ask for work and carry none (PING, SETTINGS, PRIORITY, empty DATA, unknown types…): likewise. */
  idleFrameBurst: 10_000,
  idleFramesPerSecond: 1000,
  /** Answer bytes a stream may hold waiting for its peer's flow-control window: beyond, the stream is reset. */
  maxQueuedPerStream: 1024 * 1024,
  /** Bytes written and not yet taken by a peer (one that never reads): beyond, the connection is cut. */
  maxUnsentBytes: 8 * 1024 * 1024,
} as const;

export function validMaxFrameSize(value: number): boolean {
  return value >= DEFAULT_MAX_FRAME && value <= LARGEST_FRAME;
}
