// The check listener's HTTP/1.1 server (src/frontends/http1/) against clients that attack it at the
// connection: what they can make it hold in memory or spend in CPU, and that the answers they are
// owed still come, in order.
import { EventEmitter } from "node:events";
import { connect, type Socket } from "node:net";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { afterEach, describe, expect, it } from "vitest";
import { Connection } from "../../src/frontends/http1/connection.js";
import type { ConnectionContext, Exchange } from "../../src/frontends/http1/exchange.js";
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
      onError: (error) => {
        throw error;
      },
    },
  );
  await listener.start();
  listeners.push(listener);
  return listener.port;
}

function open(port: number): { socket: Socket; received: () => Buffer } {
  const socket = connect(port, "127.0.0.1");
  const chunks: Buffer[] = [];
  socket.on("data", (chunk: Buffer) => chunks.push(chunk));
  socket.on("error", () => {});
  opened.push(socket);
  return { socket, received: () => Buffer.concat(chunks) };
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

describe("a body of many tiny chunks", () => {
  it("holds about its own size in memory, not a Buffer per chunk", async () => {
    setFlagsFromString("--expose-gc");
    const gc = runInNewContext("gc") as () => void;
    const heap = () => {
      gc();
      return process.memoryUsage().heapUsed;
    };
    const served: Exchange[] = [];
    const port = await listen((exchange) => {
      served.push(exchange);
      exchange.respond({ status: 200, headers: {}, body: "" });
    });
    // Two bodies of 500,000 one-byte chunks each (3 MB sent, 0.5 MB of data) are held at once.
    const clients = [open(port), open(port)];
    const chunks = 500_000;
    const start = heap();
    for (const { socket } of clients) {
      socket.write("POST /json HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
      socket.write("1\r\na\r\n".repeat(chunks));
    }
    await expect.poll(() => clients.every((c) => c.socket.bytesWritten > chunks * 6)).toBe(true);
    await sleep(500);
    const held = heap() - start;
    // A Buffer per chunk held over 100 MB for each; the data itself is 1 MB in all.
    expect(held).toBeLessThan(16 * 1024 * 1024);
    for (const { socket } of clients) socket.write("0\r\n\r\n");
    await expect.poll(() => served.length).toBe(2);
    for (const exchange of served) expect(exchange.body?.toString()).toBe("a".repeat(chunks));
  }, 30_000);
});

describe("a head sent a byte at a time", () => {
  /** A Connection on a socket of no network, and what was written to it. */
  function connection(): { socket: EventEmitter; written: unknown[] } {
    const written: unknown[] = [];
    const socket = Object.assign(new EventEmitter(), {
      remoteAddress: "192.0.2.1",
      destroyed: false,
      write(data: unknown) {
        written.push(data);
        return true;
      },
      end() {},
      destroy() {},
      pause() {},
      resume() {},
      isPaused: () => false,
      writableNeedDrain: false,
    });
    const context: ConnectionContext = {
      wantsBody: () => false,
      serve: (exchange) => exchange.respond({ status: 204, headers: {}, body: "" }),
      maxBodyBytes: 0,
      maxHeldBytes: 0,
      maxHeaderBytes: 64 * 1024,
      held: { bytes: 0 },
      now: () => 0,
      draining: () => false,
      onError: () => {},
    };
    new Connection(socket as unknown as Socket, context);
    return { socket, written };
  }

  /**
   * Feeds a new connection `head`, `step` bytes a read; the bytes it searched (indexOf) and copied
   * (copy, concat) meanwhile: counted, not timed, so that a busy machine cannot move the figure.
   */
  function feed(head: Buffer, step: number): number {
    const { socket, written } = connection();
    const { indexOf, copy } = Buffer.prototype;
    const concat = Buffer.concat;
    let touched = 0;
    Buffer.prototype.indexOf = function (this: Buffer, ...args: Parameters<Buffer["indexOf"]>) {
      touched += this.length - Math.max(0, typeof args[1] === "number" ? args[1] : 0);
      return indexOf.apply(this, args);
    };
    Buffer.prototype.copy = function (this: Buffer, ...args: Parameters<Buffer["copy"]>) {
      touched += (args[3] ?? this.length) - (args[2] ?? 0);
      return copy.apply(this, args);
    };
    Buffer.concat = (list, length) => {
      touched += list.reduce((sum, b) => sum + b.length, 0);
      return concat(list, length);
    };
    try {
      for (let at = 0; at < head.length; at += step) socket.emit("data", head.subarray(at, at + step));
    } finally {
      Object.assign(Buffer.prototype, { indexOf, copy });
      Buffer.concat = concat;
    }
    expect(String(written[0])).toMatch(/^HTTP\/1\.1 204 /);
    return touched;
  }

  const headOf = (bytes: number) =>
    Buffer.from(`GET / HTTP/1.1\r\nHost: x\r\nX-Pad: ${"a".repeat(bytes - 40)}\r\n\r\n`);

  it("costs work linear in its size, not quadratic", () => {
    const head = headOf(64 * 1024 - 100);
    // About 6.5 times its size now; copied whole and searched from its start at every read, about
    // 32,000 times (half its length).
    expect(feed(head, 1)).toBeLessThan(16 * head.length);
    expect(feed(head, head.length)).toBeLessThan(2 * head.length);
  });

  it("is held in no more memory than the head's bound, whatever the connections", () => {
    // 100 connections, each with a head of 60 KiB begun (its first byte, then the rest but its end).
    const head = headOf(60 * 1024);
    const before = process.memoryUsage().arrayBuffers;
    const held = Array.from({ length: 100 }, () => {
      const { socket } = connection();
      socket.emit("data", head.subarray(0, 1));
      socket.emit("data", head.subarray(1, head.length - 4));
      return socket;
    });
    const grown = process.memoryUsage().arrayBuffers - before;
    // 64 KiB each at most (6.4 MB): doubled past the bound, it was 12 MB.
    expect(grown).toBeLessThan(100 * 80 * 1024);
    expect(held).toHaveLength(100);
  });
});

describe("a client that half-closes after pipelining", () => {
  it("gets every answer it asked for, in order, the last closing the connection", async () => {
    const port = await listen((exchange) => {
      const answer = () => exchange.respond({ status: 200, headers: {}, body: exchange.url });
      if (exchange.url.startsWith("/slow")) setTimeout(answer, 50);
      else answer();
    });
    const client = open(port);
    client.socket.end(
      "GET /slow1 HTTP/1.1\r\nHost: x\r\n\r\nGET /slow2 HTTP/1.1\r\nHost: x\r\n\r\nGET /fast3 HTTP/1.1\r\nHost: x\r\n\r\n",
    );
    await expect.poll(() => client.socket.readyState === "closed").toBe(true);
    const text = client.received().toString("latin1");
    expect(text.match(/\r\n\r\n\/[a-z]+\d/g)).toEqual(["\r\n\r\n/slow1", "\r\n\r\n/slow2", "\r\n\r\n/fast3"]);
    expect(text.match(/connection: close/g)).toHaveLength(1);
    expect(text.endsWith("connection: close\r\n\r\n/fast3")).toBe(true);
  });

  it("is closed at once when the head it began can no longer arrive", async () => {
    const port = await listen((exchange) => exchange.respond({ status: 200, headers: {}, body: "" }));
    const client = open(port);
    client.socket.end("GET /x HTTP/1.1\r\nHost: x\r\n");
    const started = Date.now();
    await expect.poll(() => client.socket.readyState === "closed", { timeout: 5_000 }).toBe(true);
    // Not after the head's 10 s timeout, with a 408 to a client that can send nothing more.
    expect(Date.now() - started).toBeLessThan(3_000);
  });

  it("is answered 400 and closed at once when the body it began can no longer arrive", async () => {
    // A check is answered later (as the store answers), its body dropped meanwhile.
    const port = await listen((exchange) =>
      setTimeout(() => exchange.respond({ status: 200, headers: {}, body: "" }), 50),
    );
    for (const path of ["/json", "/check"]) {
      const client = open(port);
      client.socket.end(`POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"a":`);
      const started = Date.now();
      await expect.poll(() => client.socket.readyState === "closed", { timeout: 5_000 }).toBe(true);
      // Not after the request's 30 s timeout; a check whose body is dropped still gets its answer.
      expect(Date.now() - started, path).toBeLessThan(3_000);
      const answers = statuses(client.received().toString("latin1"));
      expect(answers, path).toEqual([path === "/json" ? "HTTP/1.1 400" : "HTTP/1.1 200"]);
    }
  });

  it("is closed once answered when all that followed its last request was blank lines", async () => {
    const port = await listen((exchange) =>
      setTimeout(() => exchange.respond({ status: 200, headers: {}, body: "" }), 50),
    );
    const client = open(port);
    client.socket.end("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n\r\n");
    const started = Date.now();
    await expect.poll(() => client.socket.readyState === "closed", { timeout: 5_000 }).toBe(true);
    expect(Date.now() - started).toBeLessThan(3_000);
    expect(statuses(client.received().toString("latin1"))).toEqual(["HTTP/1.1 200"]);
  });
});

describe("an answer's header of latin1 text", () => {
  it("is sent in latin1, as node:http sends it, whatever the body", async () => {
    const port = await listen((exchange) =>
      exchange.respond({
        status: 200,
        headers: { "x-user-id": "jos\u00e9" },
        body: exchange.url === "/ascii" ? "ok" : "d\u00e9j\u00e0",
      }),
    );
    for (const path of ["/ascii", "/utf8"]) {
      const client = open(port);
      client.socket.end(`GET ${path} HTTP/1.1\r\nHost: x\r\n\r\n`);
      await expect.poll(() => client.socket.readyState === "closed").toBe(true);
      const received = client.received();
      expect(received.includes(Buffer.from("\r\nx-user-id: jos\xe9\r\n", "latin1")), path).toBe(true);
    }
  });
});
