// What a client that holds connections open, or trickles what it sends, can make the HTTP listeners
// hold: bounded in bytes and in time, whatever the number of connections.
import { connect, type Socket } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { MAX_HELD_BODY_BYTES } from "../../src/frontends/check-listener.js";
import { http1Listener } from "../../src/frontends/http1/server.js";
import type { Listener } from "../../src/frontends/listener.js";
import { rlsJsonRoute } from "../../src/frontends/rls-json.js";
import { httpListener } from "../../src/http/http-listener.js";
import { HEADERS_TIMEOUT_MS, REQUEST_TIMEOUT_MS } from "../../src/http/server.js";
import { startInProcess } from "../support/in-process.js";

const opened: Socket[] = [];
const listeners: Listener[] = [];

afterEach(async () => {
  for (const socket of opened.splice(0)) socket.destroy();
  await Promise.all(listeners.splice(0).map((l) => l.stop({ force: true })));
});

async function listen(handler: Parameters<typeof httpListener>[1]): Promise<number> {
  const listener = httpListener(
    { name: "check", host: "127.0.0.1", port: 0, settings: { host: "CHECK_HOST", port: "CHECK_PORT" } },
    handler,
  );
  await listener.start();
  listeners.push(listener);
  return listener.port;
}

/** A connection that keeps what the server answers, as text. */
function open(port: number): { socket: Socket; received: () => string } {
  const socket = connect(port, "127.0.0.1");
  const chunks: Buffer[] = [];
  socket.on("data", (chunk: Buffer) => chunks.push(chunk));
  socket.on("error", () => {});
  opened.push(socket);
  return { socket, received: () => Buffer.concat(chunks).toString("latin1") };
}

/** Writes `line` every second until the connection closes. */
function trickle(socket: Socket, line: string): void {
  const timer = setInterval(() => socket.writable && socket.write(line), 1_000);
  socket.on("close", () => clearInterval(timer));
}

const closed = (socket: Socket) => () => socket.destroyed || socket.readyState === "closed";

/** A check listener (its own HTTP/1.1 server) whose one route reads the body whole and answers "ok". */
async function listenHttp1(): Promise<number> {
  const listener = http1Listener(
    { name: "check", host: "127.0.0.1", port: 0, settings: { host: "CHECK_HOST", port: "CHECK_PORT" } },
    {
      wantsBody: () => true,
      serve: (exchange) => exchange.respond({ status: 200, headers: {}, body: "ok" }),
      maxBodyBytes: 1024 * 1024,
      maxHeldBytes: MAX_HELD_BODY_BYTES,
      onError: (error) => {
        throw error;
      },
    },
  );
  await listener.start();
  listeners.push(listener);
  return listener.port;
}

/** Slow clients on the listener at `port`: the bounds of docs/security.md hold (one at a time, in parallel). */
async function slowClients(port: number, what: string): Promise<void> {
  const silent = open(port);
  const headers = open(port);
  headers.socket.write("GET /health HTTP/1.1\r\nHost: x\r\n");
  trickle(headers.socket, "X-Slow: a\r\n");
  const body = open(port);
  body.socket.write("POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
  trickle(body.socket, "1\r\na\r\n");
  const idle = open(port);
  idle.socket.write("GET /a HTTP/1.1\r\nHost: x\r\n\r\n");

  const slack = 5_000;
  await expect.poll(closed(headers.socket), { timeout: HEADERS_TIMEOUT_MS + slack }).toBe(true);
  expect(headers.received(), what).toMatch(/^HTTP\/1\.1 408 /);
  await expect.poll(closed(silent.socket)).toBe(true);
  // Idle past the headers' timeout between two requests, the keep-alive connection still serves.
  expect(closed(idle.socket)(), what).toBe(false);
  idle.socket.write("GET /b HTTP/1.1\r\nHost: x\r\n\r\n");
  await expect.poll(() => idle.received().split("HTTP/1.1 200 ").length - 1).toBe(2);
  await expect
    .poll(closed(body.socket), { timeout: REQUEST_TIMEOUT_MS - HEADERS_TIMEOUT_MS + slack })
    .toBe(true);
  expect(body.received(), what).toMatch(/^HTTP\/1\.1 408 /);
}

describe("slow clients on an HTTP listener", () => {
  it("answers 408 and closes a request whose headers or body trickle in past their timeouts, and no idle keep-alive: node:http's listeners and the check listener's own server", async () => {
    // The bounds stated in docs/security.md, and the servers' checks of them a second apart.
    expect([HEADERS_TIMEOUT_MS, REQUEST_TIMEOUT_MS]).toEqual([10_000, 30_000]);
    const node = await listen((req, res) => {
      req.resume();
      req.on("end", () => res.end("ok"));
    });
    const own = await listenHttp1();
    // Side by side, in one test: the sockets of both go only once both are judged.
    await Promise.all([slowClients(node, "node:http"), slowClients(own, "the check listener's own server")]);
  }, 60_000);
});

describe("MAX_CONNECTIONS", () => {
  /** What a listener answers a first request on a new connection: an HTTP status line, or the server's SETTINGS. */
  const ask = (name: string, socket: Socket) =>
    socket.write(
      name === "grpc"
        ? Buffer.concat([
            Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"),
            Buffer.from([0, 0, 0, 4, 0, 0, 0, 0, 0]),
          ])
        : "GET /health HTTP/1.1\r\nHost: x\r\n\r\n",
    );
  const connected = (socket: Socket) => new Promise((resolve) => socket.once("connect", resolve));

  it("closes each listener's connections past the bound as they arrive, unanswered, and serves again below it", async () => {
    const t = await startInProcess({ env: { MAX_CONNECTIONS: "3" }, demoUsers: false });
    try {
      for (const name of ["public", "check", "grpc", "admin"]) {
        const port = Number(
          new URL(
            name === "grpc"
              ? t.grpcUrl
              : name === "check"
                ? t.checkUrl
                : name === "public"
                  ? t.publicUrl
                  : t.adminUrl,
          ).port,
        );
        const held = [open(port), open(port), open(port)];
        await Promise.all(held.map((c) => connected(c.socket)));
        const past = open(port);
        await connected(past.socket);
        ask(name, past.socket);
        await expect.poll(closed(past.socket), { timeout: 5_000 }).toBe(true);
        expect(past.received(), name).toBe("");
        // One of the three goes: once the listener has seen it close, a new connection is served.
        (held[0] as (typeof held)[0]).socket.destroy();
        const again = async () => {
          const client = open(port);
          await connected(client.socket);
          ask(name, client.socket);
          await expect.poll(() => client.received() !== "" || closed(client.socket)()).toBe(true);
          return client.received();
        };
        await expect.poll(again, { timeout: 5_000 }).not.toBe("");
        for (const c of held) c.socket.destroy();
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      const full = t.logWrites().filter((line) => line.includes('"event":"connections_full"'));
      expect(full.map((line) => JSON.parse(line).listener).sort()).toEqual([
        "admin",
        "check",
        "grpc",
        "public",
      ]);
    } finally {
      await t.close();
    }
  });
});

describe("a JSON body announced over 16 kB", () => {
  it("is refused 413 at once on the public and admin APIs, not once it has all been read", async () => {
    const t = await startInProcess({ demoUsers: false });
    try {
      for (const [url, path, auth] of [
        [t.publicUrl, "/auth/login", ""],
        [t.adminUrl, "/admin/users", `Authorization: Bearer ${t.adminToken}\r\n`],
      ] as const) {
        const client = open(Number(new URL(url).port));
        client.socket.write(
          `POST ${path} HTTP/1.1\r\nHost: x\r\n${auth}Content-Type: application/json\r\nContent-Length: 100000000\r\n\r\n{"username":`,
        );
        // Only the first bytes of 100 MB were sent: the answer cannot wait for the rest.
        await expect.poll(client.received, { timeout: 5_000 }).toContain('"error":"payload_too_large"');
        expect(client.received(), path).toMatch(/^HTTP\/1\.1 413 /);
      }
    } finally {
      await t.close();
    }
  });
});

describe("POST /json on the check listener", () => {
  const route = rlsJsonRoute(() => () => ({ overall_code: 1, statuses: [] }), undefined);

  it("holds at most 64 MiB of bodies at once across connections, and refuses 503 past it", async () => {
    const listener = http1Listener(
      { name: "check", host: "127.0.0.1", port: 0, settings: { host: "CHECK_HOST", port: "CHECK_PORT" } },
      {
        wantsBody: () => true,
        serve: (exchange) => route.serve(exchange),
        maxBodyBytes: route.maxBodyBytes,
        maxHeldBytes: MAX_HELD_BODY_BYTES,
        onError: (error) => {
          throw error;
        },
      },
    );
    await listener.start();
    listeners.push(listener);
    const port = listener.port;
    const each = 1_000_000;
    // 70 connections, each sending all but the end of a 1 MiB body and then waiting: 70 MB held
    // without a bound on all of them together.
    const head = `POST /json HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${1024 * 1024}\r\n\r\n`;
    const clients = Array.from({ length: 70 }, () => {
      const client = open(port);
      client.socket.write(head);
      client.socket.write(Buffer.alloc(each, 0x20));
      return client;
    });
    const refusals = () => clients.filter((c) => c.received().startsWith("HTTP/1.1 503 ")).length;
    // Once the server has read what it was sent, whatever held more than the bound was refused.
    const mustRefuse = 70 - Math.floor(MAX_HELD_BODY_BYTES / each);
    await expect.poll(refusals, { timeout: 20_000, interval: 100 }).toBeGreaterThanOrEqual(mustRefuse);
    const refused = clients.find((c) => c.received().startsWith("HTTP/1.1 503 "))?.received() ?? "";
    expect(refused).toMatch(/\r\nretry-after: 1\r\n/i);
    expect(refused).toContain('"error":"unavailable"');

    // The bytes are given back as their connections go: a whole request is then served.
    for (const client of clients) client.socket.destroy();
    const body = JSON.stringify({ domain: "d", descriptors: [{ entries: [{ key: "k", value: "v" }] }] });
    const served = open(port);
    served.socket.write(
      `POST /json HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`,
    );
    await expect.poll(served.received, { timeout: 10_000 }).toMatch(/^HTTP\/1\.1 200 /);
  });
});
