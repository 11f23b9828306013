// The ceilings that tollgate's check is compared with, each run by bench/run.mjs as its own process:
//   http   a bare node:http server answering 200;
//   store  the same, after one EVALSHA of a minimal sliding-window script per request (ioredis, no extras);
//          with COALESCE=1, the writes of one event-loop turn go out as one (corked until setImmediate),
//          as tollgate's hot calls do: the same trick for the ceiling, so that neither side has it alone;
//   fixed  the same, after one pipelined INCR + PEXPIRE per request: a fixed window, the least Redis
//          work a shared limiter can do (what envoyproxy/ratelimit does per descriptor).
// Env: PORT, HOST, and for "store"/"fixed" REDIS_URL, WINDOW_KEY, WINDOW_LIMIT, WINDOW_MS.
// GET /count: requests served.
import { randomBytes } from "node:crypto";
import { createServer } from "node:http";
import { Redis } from "ioredis";

// The minimum a shared sliding-window log needs: Redis TIME, trim, count, add, expire. Microsecond
// numbers go back to Redis through %d, since Lua's default formatting would round them.
const WINDOW_LUA = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local window_us = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%d', now - window_us))
local used = redis.call('ZCARD', KEYS[1])
if used < tonumber(ARGV[1]) then
  redis.call('ZADD', KEYS[1], string.format('%d', now), ARGV[3])
  redis.call('PEXPIRE', KEYS[1], string.format('%d', window_us / 1000))
  return {1, used + 1}
end
return {0, used}
`;

const mode = process.argv[2];
const port = Number(process.env.PORT);
const host = process.env.HOST ?? "127.0.0.1";
const EMPTY = { "content-length": "0" };
/** Requests answered so far, served on GET /count (no Redis call) so the bench can divide exactly. */
let handled = 0;

function storeHandler() {
  const redis = new Redis(process.env.REDIS_URL ?? "redis://127.0.0.1:6379", { maxRetriesPerRequest: 1 });
  redis.defineCommand("windowHit", { numberOfKeys: 1, lua: WINDOW_LUA });
  const key = process.env.WINDOW_KEY ?? "bench:{ceiling}:w:general";
  const limit = Number(process.env.WINDOW_LIMIT ?? 1_000_000);
  const windowUs = Number(process.env.WINDOW_MS ?? 10_000) * 1000;
  const instance = randomBytes(4).readUInt32BE().toString(36);
  let counter = 0;
  const coalesce = process.env.COALESCE === "1";
  let corked;
  const uncork = () => {
    const stream = corked;
    corked = undefined;
    stream.uncork();
  };
  const handler = (req, res) => {
    req.resume();
    counter += 1;
    handled += 1;
    if (coalesce && corked === undefined && redis.status === "ready") {
      corked = redis.stream;
      corked.cork();
      setImmediate(uncork);
    }
    redis.windowHit(key, limit, windowUs, `${counter.toString(36)}.${instance}`).then(
      (reply) => {
        res.writeHead(reply[0] === 1 ? 200 : 429, EMPTY);
        res.end();
      },
      () => {
        res.writeHead(503, EMPTY);
        res.end();
      },
    );
  };
  return { handler, close: () => redis.quit() };
}

function fixedHandler() {
  const redis = new Redis(process.env.REDIS_URL ?? "redis://127.0.0.1:6379", { maxRetriesPerRequest: 1 });
  const key = process.env.WINDOW_KEY ?? "bench:{fixed}:w:general";
  const limit = Number(process.env.WINDOW_LIMIT ?? 1_000_000);
  const windowMs = Number(process.env.WINDOW_MS ?? 10_000);
  const handler = (req, res) => {
    req.resume();
    handled += 1;
    // One round trip: both commands in one write. The window's key is its start, as fixed windows do.
    const windowKey = `${key}:${Math.floor(Date.now() / windowMs)}`;
    redis
      .pipeline()
      .incr(windowKey)
      .pexpire(windowKey, windowMs)
      .exec()
      .then(
        (replies) => {
          const [error, count] = replies?.[0] ?? [new Error("no reply")];
          res.writeHead(error === null && count <= limit ? 200 : 429, EMPTY);
          res.end();
        },
        () => {
          res.writeHead(503, EMPTY);
          res.end();
        },
      );
  };
  return { handler, close: () => redis.quit() };
}

function httpHandler() {
  const handler = (req, res) => {
    req.resume();
    handled += 1;
    res.writeHead(200, EMPTY);
    res.end();
  };
  return { handler, close: async () => {} };
}

const handlers = { http: httpHandler, store: storeHandler, fixed: fixedHandler };
if (!Object.hasOwn(handlers, mode)) {
  process.stderr.write("usage: node bench/ceiling-server.mjs http|store|fixed\n");
  process.exit(2);
}
const { handler, close } = handlers[mode]();
const server = createServer((req, res) => {
  if (req.url === "/count") {
    res.writeHead(200, { "content-type": "text/plain" });
    res.end(String(handled));
    return;
  }
  handler(req, res);
});
server.keepAliveTimeout = 75_000;
server.listen(port, host);

const stop = () => {
  server.close();
  server.closeAllConnections();
  void close().finally(() => process.exit(0));
};
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
