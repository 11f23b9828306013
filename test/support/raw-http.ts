// Raw HTTP/1.1 over a socket: bytes written as given and read back as received, for requests node's
// client refuses to send (CR/LF, control bytes, broken framing) and answers it could not parse. Not a
// second client: every well-formed request goes through http-client.mjs.
import { connect } from "node:net";

export type RawReply = {
  /** 0 when the server closed the connection without an answer. */
  status: number;
  /** Header lines as received, name lower-cased. */
  headers: Array<[string, string]>;
  body: string;
  /** Everything received, byte for byte (latin1). */
  raw: string;
};

/** The data of a chunked body (chunk extensions and trailers ignored). */
function dechunk(payload: string): string {
  let body = "";
  let rest = payload;
  for (;;) {
    const lineEnd = rest.indexOf("\r\n");
    if (lineEnd === -1) return body;
    const size = Number.parseInt(rest.slice(0, lineEnd), 16);
    if (!(size > 0)) return body;
    body += rest.slice(lineEnd + 2, lineEnd + 2 + size);
    rest = rest.slice(lineEnd + 2 + size + 2);
  }
}

/** Sends `request` as is (latin1 bytes unless a Buffer) and reads until the server closes. */
export function rawRequest(url: string, request: string | Buffer, timeoutMs = 5000): Promise<RawReply> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname);
    const chunks: Buffer[] = [];
    const timer = setTimeout(() => {
      socket.destroy();
      reject(
        new Error(`no answer within ${timeoutMs} ms to ${JSON.stringify(request.toString().slice(0, 200))}`),
      );
    }, timeoutMs);
    socket.on("data", (chunk: Buffer) => chunks.push(chunk));
    socket.on("error", () => {
      // A reset after the answer is fine; what arrived is judged below.
    });
    socket.on("close", () => {
      clearTimeout(timer);
      const raw = Buffer.concat(chunks).toString("latin1");
      const end = raw.indexOf("\r\n\r\n");
      const head = end === -1 ? raw : raw.slice(0, end);
      const [statusLine = "", ...lines] = head.split("\r\n");
      const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(statusLine)?.[1] ?? 0);
      const headers = lines.map((line): [string, string] => {
        const colon = line.indexOf(":");
        return [line.slice(0, colon).toLowerCase(), line.slice(colon + 1).trim()];
      });
      const payload = end === -1 ? "" : raw.slice(end + 4);
      const chunked = headers.some(([name, value]) => name === "transfer-encoding" && /chunked/i.test(value));
      resolve({ status, headers, body: chunked ? dechunk(payload) : payload, raw });
    });
    socket.write(typeof request === "string" ? Buffer.from(request, "latin1") : request);
  });
}
