// One gRPC call over node:http2's client (nghttp2), a different HTTP/2 from tollgate's own: its
// status (from the headers of a Trailers-Only answer, or the trailers), its message, and its time;
// optionally reset by the client while it waits.
import * as http2 from "node:http2";
import { grpcMessage } from "./h2-raw.js";

export type H2Answer = {
  /** grpc-status; undefined when the stream ended without one (reset). */
  status: string | undefined;
  message: Buffer;
  ms: number;
};

export function h2Call(
  session: http2.ClientHttp2Session,
  path: string,
  message: Uint8Array,
  options: { headers?: http2.OutgoingHttpHeaders; resetAfterMs?: number } = {},
): Promise<H2Answer> {
  const started = performance.now();
  return new Promise((resolve) => {
    const req = session.request({
      ":method": "POST",
      ":path": path,
      "content-type": "application/grpc",
      te: "trailers",
      ...options.headers,
    });
    let status: string | undefined;
    const chunks: Buffer[] = [];
    req.on("response", (h) => {
      status ??= h["grpc-status"] as string | undefined;
    });
    req.on("trailers", (t) => {
      status = t["grpc-status"] as string | undefined;
    });
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("error", () => undefined);
    req.on("close", () =>
      resolve({ status, message: Buffer.concat(chunks).subarray(5), ms: performance.now() - started }),
    );
    req.end(grpcMessage(message));
    if (options.resetAfterMs !== undefined) {
      setTimeout(() => req.close(http2.constants.NGHTTP2_CANCEL), options.resetAfterMs);
    }
  });
}
