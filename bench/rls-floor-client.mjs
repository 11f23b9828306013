// The rate limit service's fixed-window floor, run by bench/run.mjs as a process of its own for each
// slice: what envoyproxy/ratelimit does in Redis for one descriptor, `INCRBY key 1` and `EXPIRE key 60`
// pipelined in one round trip (its key names the descriptor and the window's start, as the reference's
// do), by an ioredis client keeping CONCURRENCY calls in flight for DURATION_MS. No server, no
// protocol: the least a fixed-window rate limit service can make Redis do per descriptor.
// Env: REDIS_URL, KEY (the descriptor's part of the key), CONCURRENCY, DURATION_MS, UNIT_SECONDS (60),
// LATENCY_FILE (each call's ms, as float64 in this machine's byte order; optional).
// Prints {"calls", "errors", "seconds"} as JSON on stdout.
import { writeFileSync } from "node:fs";
import { Redis } from "ioredis";

const redis = new Redis(process.env.REDIS_URL ?? "redis://127.0.0.1:6379", { maxRetriesPerRequest: 1 });
const key = process.env.KEY ?? "bench_floor_alg_fixed_one";
const concurrency = Number(process.env.CONCURRENCY ?? 64);
const durationMs = Number(process.env.DURATION_MS ?? 1000);
const unitSeconds = Number(process.env.UNIT_SECONDS ?? 60);

let latencies = new Float64Array(1 << 16);
let calls = 0;
let errors = 0;

function record(ms) {
  if (calls === latencies.length) {
    const grown = new Float64Array(latencies.length * 2);
    grown.set(latencies);
    latencies = grown;
  }
  latencies[calls] = ms;
  calls += 1;
}

/** One descriptor's hit as the reference makes it: the window's key, INCRBY and EXPIRE in one write. */
async function hit() {
  const nowSeconds = Math.floor(Date.now() / 1000);
  const windowKey = `${key}_${nowSeconds - (nowSeconds % unitSeconds)}`;
  const replies = await redis.pipeline().incrby(windowKey, 1).expire(windowKey, unitSeconds).exec();
  if (replies === null || replies.some(([error]) => error !== null)) throw new Error("a pipeline failed");
}

async function worker(endsAt) {
  while (performance.now() < endsAt) {
    const started = performance.now();
    try {
      await hit();
      record(performance.now() - started);
    } catch {
      errors += 1;
    }
  }
}

await new Promise((resolve, reject) => {
  redis.once("ready", resolve);
  redis.once("error", reject);
});
const started = performance.now();
const endsAt = started + durationMs;
await Promise.all(Array.from({ length: concurrency }, () => worker(endsAt)));
const seconds = (performance.now() - started) / 1000;
if (process.env.LATENCY_FILE) {
  const view = latencies.subarray(0, calls);
  writeFileSync(process.env.LATENCY_FILE, new Uint8Array(view.buffer, view.byteOffset, view.byteLength));
}
process.stdout.write(`${JSON.stringify({ calls, errors, seconds })}\n`);
redis.disconnect();
