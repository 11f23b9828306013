// MAX_CONNECTIONS with WORKERS: node:cluster's primary accepts and hands each connection to a
// worker, so a worker's bound must close a connection past it, not hand it back (which the
// primary then hands from worker to worker for as long as every worker is full).
import { connect, type Socket } from "node:net";
import { afterAll, describe, expect, it } from "vitest";
import { startRedisServer, startTollgate, stopAll } from "../support/processes.mjs";

afterAll(async () => {
  await stopAll();
});

const WORKERS = 2;
const MAX = 2;

/** A connection that keeps what the server sends, and says whether it has closed. */
function open(port: number) {
  const socket: Socket = connect(port, "127.0.0.1");
  const chunks: Buffer[] = [];
  socket.on("data", (chunk: Buffer) => chunks.push(chunk));
  socket.on("error", () => {});
  let closed = false;
  socket.on("close", () => {
    closed = true;
  });
  return { socket, received: () => Buffer.concat(chunks).length, closed: () => closed };
}

describe("MAX_CONNECTIONS with WORKERS", () => {
  it("closes a connection past every worker's bound as it arrives, unanswered, and logs it", async () => {
    const redis = await startRedisServer();
    const t = await startTollgate(
      { REDIS_URL: redis.url, REDIS_KEY_PREFIX: "workers-connections:", MAX_CONNECTIONS: String(MAX) },
      { name: "tollgate-workers-connections", workers: WORKERS },
    );
    for (const [name, port] of [
      ["check", t.checkPort],
      ["grpc", t.grpcPort],
    ] as const) {
      const held: ReturnType<typeof open>[] = [];
      // One more than the workers hold together: however the primary spreads them, one is refused.
      for (let i = 0; i <= WORKERS * MAX; i += 1) {
        held.push(open(port));
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
      await expect.poll(() => held.filter((c) => c.closed()).length, { timeout: 3_000 }).toBe(1);
      const refused = held.find((c) => c.closed());
      expect(refused?.received(), name).toBe(0);
      // Closed from this side, then seen closed from the server's: only then has its worker let go
      // of it. A connection opened right after a destroy() raced the workers' count of the closes,
      // and a worker that had not counted them yet refused it as past its bound.
      for (const c of held) c.socket.end();
      await expect.poll(() => held.every((c) => c.closed()), { timeout: 3_000 }).toBe(true);
      // Below the bound again: a new connection is served.
      const again = open(port);
      again.socket.write(
        name === "check" ? "GET /health HTTP/1.1\r\nHost: x\r\n\r\n" : "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
      );
      await expect.poll(() => again.received() > 0, { timeout: 3_000 }).toBe(true);
      again.socket.destroy();
    }
    const full = t
      .output()
      .split("\n")
      .filter((line) => line.includes('"event":"connections_full"'))
      .map((line) => JSON.parse(line).listener);
    expect(new Set(full)).toEqual(new Set(["check", "grpc"]));
  });
});
