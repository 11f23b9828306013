// A tiny HTTP server for harness tests: records every request it receives and answers what the test says.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

export type Recorded = { method: string; url: string; headers: IncomingMessage["headers"]; body: string };
export type ScriptedAnswer = {
  status: number;
  headers?: Record<string, string | string[]>;
  body?: string;
  delayMs?: number;
};
export type RecordingServer = {
  url: string;
  port: number;
  received: Recorded[];
  close(): Promise<void>;
};

export async function recordingServer(
  answer: (req: Recorded) => ScriptedAnswer,
  options: { maxHeaderBytes?: number } = {},
): Promise<RecordingServer> {
  const received: Recorded[] = [];
  const limits = options.maxHeaderBytes === undefined ? {} : { maxHeaderSize: options.maxHeaderBytes };
  const server: Server = createServer(limits, (req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => {
      const recorded = {
        method: req.method ?? "",
        url: req.url ?? "",
        headers: req.headers,
        body: Buffer.concat(chunks).toString("utf8"),
      };
      received.push(recorded);
      const reply = answer(recorded);
      setTimeout(() => {
        res.writeHead(reply.status, reply.headers ?? {});
        res.end(reply.body ?? "");
      }, reply.delayMs ?? 0);
    });
  });
  server.keepAliveTimeout = 60_000;
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    received,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
