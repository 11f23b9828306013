// Instructions of redis-server per rate limit service call, from callgrind: deterministic where the
// bench's Redis CPU follows the machine's load. Starts redis-server under valgrind (a fresh one per
// run), collecting only in readQueryFromClient and the writing of replies (serverCron, whose share
// follows wall time under valgrind, left out), makes WARM calls, zeroes the counts, makes CALLS calls
// one at a time (one read and one reply each) and prints the instructions per call.
//
//   node bench/rls-callgrind.mjs <target> <descriptors> [algorithm]
//
// target: a tollgate build's folder (its dist/ limiter, mode each, the bench's key shapes and limits:
// windows of 4,294,967,295 a minute, a sliding log's of 1,000,000 a second; the algorithm
// fixed-window unless named), `floor` (INCRBY + EXPIRE per descriptor, as envoyproxy/ratelimit
// and bench/rls-floor-client.mjs), `pexpire-nx` (INCRBY + PEXPIRE … NX every call) or `setnx`
// (SET … 0 NX PX + INCRBY every call). Needs valgrind (Debian's package) and redis-server.
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { Redis } from "ioredis";

const [target = "floor", descriptorsArg = "1", algorithm = "fixed-window"] = process.argv.slice(2);
const n = Number(descriptorsArg);
const WARM = 200;
const CALLS = 2000;

const port = await new Promise((done) => {
  const server = createServer().listen(0, "127.0.0.1", () => {
    const { port: free } = server.address();
    server.close(() => done(free));
  });
});
const dir = mkdtempSync(join(tmpdir(), "rls-callgrind-"));
const valgrind = spawn(
  "valgrind",
  [
    "--tool=callgrind",
    `--callgrind-out-file=${join(dir, "callgrind.out")}`,
    "--toggle-collect=readQueryFromClient",
    "--toggle-collect=handleClientsWithPendingWritesUsingThreads",
    "--toggle-collect=sendReplyToClient",
    "redis-server",
    "--port",
    String(port),
    "--save",
    "",
    "--appendonly",
    "no",
    "--dir",
    dir,
  ],
  { stdio: "ignore" },
);
const redis = new Redis({
  port,
  maxRetriesPerRequest: 1,
  retryStrategy: (attempt) => (attempt > 100 ? null : 200),
});
// Refused connections until valgrind's redis-server listens: expected, retried.
redis.on("error", () => undefined);
await new Promise((done, fail) => {
  redis.once("ready", done);
  valgrind.once("exit", () => fail(new Error("redis-server under valgrind exited")));
});

const windowStart = (ms) => ms - (ms % 60_000);
const rawKey = (i) =>
  `tollgate:{rls:bench|alg_fixed=three-${i}}:w:rls-0123456789abcdef:${windowStart(Date.now())}`;
let call;
if (target === "floor") {
  call = async () => {
    const seconds = Math.floor(Date.now() / 1000);
    const pipeline = redis.pipeline();
    for (let i = 0; i < n; i += 1) {
      const key = `bench_alg_fixed_three-${i}_${seconds - (seconds % 60)}`;
      pipeline.incrby(key, 1).expire(key, 60);
    }
    await pipeline.exec();
  };
} else if (target === "pexpire-nx" || target === "setnx") {
  call = async () => {
    const pipeline = redis.pipeline();
    for (let i = 0; i < n; i += 1) {
      const key = rawKey(i);
      const ttl = windowStart(Date.now()) + 120_000 - Date.now();
      if (target === "setnx") pipeline.set(key, "0", "PX", ttl, "NX").incrby(key, 1);
      else pipeline.incrby(key, 1).call("PEXPIRE", key, ttl, "NX");
    }
    await pipeline.exec();
  };
} else {
  const dist = join(resolve(target), "dist/src/store/redis");
  const { createRedisLimiter } = await import(join(dist, "limiter.js"));
  const { createKeys } = await import(join(dist, "keys.js"));
  const limiter = createRedisLimiter({ redis, keys: createKeys("tollgate:") });
  const window =
    algorithm === "sliding-log"
      ? { limit: 1_000_000, windowMs: 1_000 }
      : { limit: 4_294_967_295, windowMs: 60_000 };
  const rule = { algorithm, windows: [window] };
  const layers = Array.from({ length: n }, (_, i) => ({
    subject: `rls:bench|alg_${algorithm}=three-${i}`,
    category: `rls-${(0x123456789abcde0 + i).toString(16).padStart(16, "0")}`,
    rule,
  }));
  call = async () => {
    const result = await limiter.limit({ layers, addend: 1, mode: "each" });
    if (result.kind !== "limited" || !result.allowed) throw new Error(`unexpected answer: ${result.kind}`);
  };
}

for (let i = 0; i < WARM; i += 1) await call();
execFileSync("callgrind_control", ["-z", String(valgrind.pid)], { stdio: "ignore" });
for (let i = 0; i < CALLS; i += 1) await call();
execFileSync("callgrind_control", ["-d", String(valgrind.pid)], { stdio: "ignore" });
const dump = readdirSync(dir)
  .filter((name) => name.startsWith("callgrind.out."))
  .sort()
  .at(-1);
const totals = /^(?:totals|summary):\s*(\d+)/m.exec(readFileSync(join(dir, dump), "utf8"));
const instructions = Number(totals?.[1]);
const stats = (await redis.info("commandstats"))
  .split("\r\n")
  .filter((line) => /^cmdstat_(?!info|ping)/.test(line))
  .map((line) => line.replace(/^cmdstat_([^:]+):calls=(\d+).*/, "$1 $2"));
process.stdout.write(
  `${JSON.stringify({ target, descriptors: n, algorithm, instructionsPerCall: Math.round(instructions / CALLS), commands: stats })}\n`,
);
await redis.call("SHUTDOWN", "NOSAVE").catch(() => undefined);
redis.disconnect();
await new Promise((done) => (valgrind.exitCode === null ? valgrind.once("exit", done) : done()));
rmSync(dir, { recursive: true, force: true });
