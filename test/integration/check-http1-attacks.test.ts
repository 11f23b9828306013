// The check listener's HTTP/1.1 server (src/frontends/http1/) against clients that attack it at the
// connection: what they can make it hold in memory or spend in CPU, and that the answers they are
// owed still come, in order.
import { connect, type Socket } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import type { Exchange } from "../../src/frontends/http1/connection.js";
import { http1Listener } from "../../src/frontends/http1/server.js";
import type { Listener } from "../../src/frontends/listener.js";

const opened: Socket[] = [];
const listeners: Listener[] = [];

afterEach(async () => {
  for (const socket of opened.splice(0)) socket.destroy();
  await Promise.all(listeners.splice(0).map((l) => l.stop({ force: true })));
});

/** A check listener whose requests `serve` answers; POST /json has its body read. */
async function listen(serve: (exchange: Exchange) => void): Promise<number> {
  const listener = http1Listener(
    { name: "check", host: "127.0.0.1", port: 0, settings: { host: "CHECK_HOST", port: "CHECK_PORT" } },
    {
      wantsBody: (url) => url === "/json",
      serve,
      maxBodyBytes: 1024 * 1024,
      maxHeldBytes: 64 * 1024 * 1024,
      onWriteError: (error) => {
        throw error;
      },
    },
  );
  await listener.start();
  listeners.push(listener);
  return listener.port;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const statuses = (text: string) => text.match(/HTTP\/1\.1 \d{3}/g) ?? [];

describe("a client that pipelines requests and never reads the answers", () => {
  it("is read no further once its answers fill the socket, and is answered in full once it reads", async () => {
    let served = 0;
    const body = "x".repeat(4096);
    const port = await listen((exchange) => {
      served += 1;
      exchange.respond({ status: 429, headers: { "content-type": "text/plain" }, body });
    });
    const socket = connect(port, "127.0.0.1");
    opened.push(socket);
    socket.on("error", () => {});
    socket.pause();
    // 20,000 requests in 0.6 MB would be 80 MB of answers held for a client that reads none.
    const count = 20_000;
    socket.write("GET /x HTTP/1.1\r\nHost: x\r\n\r\n".repeat(count));
    let before = -1;
    while (served !== before) {
      before = served;
      await sleep(300);
    }
    // What the kernel's buffers take, and no more: a few MB of answers at most.
    expect(served).toBeLessThan(count / 4);

    // Once the client reads, the rest are read and answered, every one in order.
    let answers = 0;
    let tail = "";
    socket.on("data", (chunk: Buffer) => {
      const text = tail + chunk.toString("latin1");
      answers += statuses(text).length;
      tail = text.slice(-16);
      answers -= statuses(tail).length;
    });
    socket.resume();
    await expect.poll(() => served, { timeout: 20_000 }).toBe(count);
    await expect.poll(() => answers + statuses(tail).length, { timeout: 10_000 }).toBe(count);
  }, 40_000);
});
