// The check listener's own HTTP/1.1 server, over real sockets: answers in request order whatever
// their speed, bodies read or dropped without losing the next request, 100-continue, HTTP/1.0,
// HEAD, a client's half-close, and draining.
import { connect, type Socket } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import type { Exchange } from "../../src/frontends/http1/exchange.js";
import { http1Listener } from "../../src/frontends/http1/server.js";
import type { Listener } from "../../src/frontends/listener.js";

const listeners: Listener[] = [];
const sockets: Socket[] = [];

afterEach(async () => {
  for (const socket of sockets.splice(0)) socket.destroy();
  await Promise.all(listeners.splice(0).map((l) => l.stop({ force: true })));
});

/**
 * A listener whose routes answer with what they saw: `/slow/N` after N ms, anything else at once;
 * `/json` reads its body whole, every other route drops it.
 */
async function start(): Promise<Listener> {
  const serve = (exchange: Exchange) => {
    const body = JSON.stringify({
      method: exchange.method,
      url: exchange.url,
      body: exchange.body?.toString("latin1"),
    });
    const answer = () =>
      exchange.respond({ status: 200, headers: { "content-type": "application/json" }, body });
    if (exchange.url === "/throw") throw new Error("a route's bug");
    const slow = /^\/slow\/(\d+)/.exec(exchange.url);
    if (slow === null) answer();
    else setTimeout(answer, Number(slow[1]));
  };
  const listener = http1Listener(
    { name: "check", host: "127.0.0.1", port: 0, settings: { host: "CHECK_HOST", port: "CHECK_PORT" } },
    {
      wantsBody: (url) => url === "/json",
      serve,
      maxBodyBytes: 1024,
      maxHeldBytes: 64 * 1024,
      onError: (error) => {
        errors.push(error);
      },
    },
  );
  await listener.start();
  listeners.push(listener);
  return listener;
}

/** What the listener's onError was given. */
const errors: unknown[] = [];

type Client = { socket: Socket; text: () => string; closed: () => boolean };

async function open(listener: Listener): Promise<Client> {
  const socket = connect(listener.port, "127.0.0.1");
  sockets.push(socket);
  const chunks: Buffer[] = [];
  let closed = false;
  socket.on("data", (chunk: Buffer) => chunks.push(chunk));
  socket.on("error", () => {});
  socket.on("close", () => {
    closed = true;
  });
  await new Promise((resolve) => socket.once("connect", resolve));
  return { socket, text: () => Buffer.concat(chunks).toString("latin1"), closed: () => closed };
}

/** The JSON bodies of the whole answers received, in order (a 100 Continue has none; not for HEAD). */
function bodies(text: string): unknown[] {
  const found: unknown[] = [];
  let rest = text;
  for (;;) {
    const end = rest.indexOf("\r\n\r\n");
    if (end === -1) return found;
    const length = Number(/\r\ncontent-length: (\d+)/.exec(rest.slice(0, end))?.[1] ?? 0);
    const withBody = length > 0;
    if (rest.length < end + 4 + (withBody ? length : 0)) return found;
    if (withBody) found.push(JSON.parse(rest.slice(end + 4, end + 4 + length)));
    rest = rest.slice(end + 4 + (withBody ? length : 0));
  }
}

const get = (path: string, extra = "") => `GET ${path} HTTP/1.1\r\nHost: x\r\n${extra}\r\n`;

describe("the check listener's HTTP/1.1 server", () => {
  it("answers pipelined requests in the order they came, however long each takes", async () => {
    const client = await open(await start());
    const paths = ["/slow/80", "/a", "/slow/30", "/b", "/slow/0", "/c"];
    client.socket.write(paths.map((p) => get(p)).join(""));
    await expect.poll(() => bodies(client.text()).length).toBe(paths.length);
    expect(bodies(client.text()).map((b) => (b as { url: string }).url)).toEqual(paths);
    expect(client.closed()).toBe(false);
  });

  it("drops a check's body, chunked or by length, and reads the next request after it", async () => {
    const client = await open(await start());
    client.socket.write(
      "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\n\r\nGET /evil\r\n" +
        "POST /b HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nGET /\r\n0\r\n\r\n" +
        'POST /json HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{"a\r\n4\r\n":1}\r\n0\r\n\r\n' +
        get("/c"),
    );
    await expect.poll(() => bodies(client.text()).length).toBe(4);
    expect(bodies(client.text())).toEqual([
      { method: "POST", url: "/a" },
      { method: "POST", url: "/b" },
      { method: "POST", url: "/json", body: '{"a":1}' },
      { method: "GET", url: "/c" },
    ]);
  });

  it("refuses a body past its bound with 413 and goes on with the next request", async () => {
    const client = await open(await start());
    client.socket.write(
      `POST /json HTTP/1.1\r\nHost: x\r\nContent-Length: 2000\r\n\r\n${"x".repeat(2000)}${get("/a")}`,
    );
    await expect.poll(() => bodies(client.text()).length).toBe(2);
    expect(client.text()).toMatch(/^HTTP\/1\.1 413 /);
    expect(bodies(client.text())[1]).toEqual({ method: "GET", url: "/a" });
  });

  it("sends 100 Continue before a body that waits for it", async () => {
    const client = await open(await start());
    client.socket.write(
      "POST /json HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n",
    );
    await expect.poll(client.text).toBe("HTTP/1.1 100 Continue\r\n\r\n");
    client.socket.write("{}");
    await expect.poll(() => bodies(client.text())).toEqual([{ method: "POST", url: "/json", body: "{}" }]);
  });

  it("keeps an HTTP/1.0 connection only when asked, and says so", async () => {
    const listener = await start();
    const once = await open(listener);
    once.socket.write("GET /a HTTP/1.0\r\n\r\n");
    await expect.poll(once.closed).toBe(true);
    expect(once.text()).toMatch(/\r\nconnection: close\r\n/);
    const kept = await open(listener);
    kept.socket.write(
      "GET /a HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /b HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
    );
    await expect.poll(() => bodies(kept.text()).length).toBe(2);
    expect(kept.text()).toMatch(/\r\nconnection: keep-alive\r\n/);
    expect(kept.closed()).toBe(false);
  });

  it("answers HEAD with the length and no body", async () => {
    const client = await open(await start());
    client.socket.write(`HEAD /a HTTP/1.1\r\nHost: x\r\n\r\n${get("/b")}`);
    await expect.poll(() => client.text().endsWith('"url":"/b"}')).toBe(true);
    const [head, rest] = client.text().split("\r\n\r\n", 2) as [string, string];
    expect(head).toMatch(/\r\ncontent-length: \d+/);
    expect(rest.startsWith("HTTP/1.1 200 ")).toBe(true);
  });

  it("still answers a client that sent its FIN after its request, then closes", async () => {
    const client = await open(await start());
    client.socket.end(get("/slow/50"));
    await expect.poll(client.closed).toBe(true);
    expect(bodies(client.text())).toEqual([{ method: "GET", url: "/slow/50" }]);
    expect(client.text()).toMatch(/\r\nconnection: close\r\n/);
  });

  it("answers 400 in JSON and closes on a head it cannot read, after the answers before it", async () => {
    const client = await open(await start());
    client.socket.write(
      `${get("/slow/30")}GET /b HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n`,
    );
    await expect.poll(client.closed).toBe(true);
    const text = client.text();
    expect(bodies(text)[0]).toEqual({ method: "GET", url: "/slow/30" });
    expect(text.slice(text.indexOf("HTTP/1.1 400 "))).toMatch(
      /connection: close\r\n\r\n\{"error":"bad_request"/,
    );
  });

  it("answers 503 to a request whose route throws, logs it, and serves the next", async () => {
    errors.length = 0;
    const client = await open(await start());
    client.socket.write(get("/throw") + get("/a"));
    await expect.poll(() => bodies(client.text()).length).toBe(2);
    expect(client.text()).toMatch(/^HTTP\/1\.1 503 /);
    expect(bodies(client.text())).toEqual([
      { error: "unavailable", message: "The request could not be completed" },
      { method: "GET", url: "/a" },
    ]);
    expect(errors.map(String)).toEqual(["Error: a route's bug"]);
  });

  it("drains: a kept connection between requests closes at once, a request in flight is answered with connection: close", async () => {
    const listener = await start();
    const idle = await open(listener);
    idle.socket.write(get("/a"));
    await expect.poll(() => bodies(idle.text()).length).toBe(1);
    const busy = await open(listener);
    busy.socket.write(get("/slow/200"));
    await new Promise((resolve) => setTimeout(resolve, 50));
    const stopped = listener.stop();
    await expect.poll(idle.closed).toBe(true);
    expect(bodies(idle.text())).toEqual([{ method: "GET", url: "/a" }]);
    await stopped;
    expect(busy.closed()).toBe(true);
    expect(bodies(busy.text())).toEqual([{ method: "GET", url: "/slow/200" }]);
    expect(busy.text()).toMatch(/\r\nconnection: close\r\n/);
  });

  it("drains: a new connection's first request, sent after the drain began, is answered, not hung up", async () => {
    const listener = await start();
    const fresh = await open(listener);
    const stopped = listener.stop();
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(fresh.closed()).toBe(false);
    fresh.socket.write(get("/a"));
    await stopped;
    expect(bodies(fresh.text())).toEqual([{ method: "GET", url: "/a" }]);
    expect(fresh.text()).toMatch(/\r\nconnection: close\r\n/);
  });
});
