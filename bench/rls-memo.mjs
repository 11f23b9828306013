// Redis CPU per rate limit service call of three sliding-log descriptors (the bench's rls-three-log
// row, mode each) beside a function library that has already seen PREFILL other sliding-log lists:
// what the library keeps between calls (its memo, lua/includes/prelude.lua) is work for Lua's
// collector, and the whole bench leaves ~9,500 lists behind it. Redis CPU from INFO (user + sys)
// over each batch, so the figure is Redis's alone; the client keeps 64 calls in flight.
//
//   node bench/rls-memo.mjs <prefill> <build> [<build>…]
//
// Each build (a tollgate folder with dist/) gets a fresh redis-server per trial; trials alternate
// between builds (TRIALS, default 5) so that the machine's drift falls on all of them alike, each
// trial counting three batches of CALLS (default 200,000). Prints each build's batches and mean.
import { join, resolve } from "node:path";
import { Redis } from "ioredis";
import { startRedisServer } from "../test/support/processes.mjs";

const [prefillArg = "9500", ...builds] = process.argv.slice(2);
if (builds.length === 0) {
  process.stderr.write("usage: node bench/rls-memo.mjs <prefill> <build> [<build>…]\n");
  process.exit(2);
}
const PREFILL = Number(prefillArg);
const TRIALS = Number(process.env.TRIALS ?? 5);
const CALLS = Number(process.env.CALLS ?? 200_000);
const IN_FLIGHT = 64;

async function trial(build) {
  const server = await startRedisServer();
  const redis = new Redis(server.url);
  const dist = join(resolve(build), "dist/src/store/redis");
  const { createRedisLimiter } = await import(join(dist, "limiter.js"));
  const { createKeys } = await import(join(dist, "keys.js"));
  const limiter = createRedisLimiter({ redis, keys: createKeys("bench:") });
  const inParallel = async (count, call) => {
    let next = 0;
    const worker = async () => {
      while (next < count) await call(next++);
    };
    await Promise.all(Array.from({ length: IN_FLIGHT }, worker));
  };
  // Lists of an hour's window, one per address, as the IP layer or users would leave them.
  const hourly = { algorithm: "sliding-log", windows: [{ limit: 100, windowMs: 3_600_000 }] };
  await inParallel(PREFILL, (i) =>
    limiter.limit({
      layers: [
        { subject: `ip:10.${i >> 16}.${(i >> 8) & 255}.${i & 255}`, category: "general", rule: hourly },
      ],
    }),
  );
  // The bench's three sliding-log descriptors: 1,000,000 a second, never full.
  const rule = { algorithm: "sliding-log", windows: [{ limit: 1_000_000, windowMs: 1_000 }] };
  const layers = [1, 2, 3].map((i) => ({
    subject: `rls:bench|alg_log=three-${i}`,
    category: "rls-51b96a4ff201d00a",
    rule,
  }));
  const call = async () => {
    const result = await limiter.limit({ layers, addend: 1, mode: "each" });
    if (result.kind !== "limited" || !result.allowed) throw new Error(`unexpected answer: ${result.kind}`);
  };
  const cpu = async () => {
    const info = await redis.info("cpu");
    const field = (name) => Number(new RegExp(`${name}:([\\d.]+)`).exec(info)?.[1]);
    return field("used_cpu_user") + field("used_cpu_sys");
  };
  await inParallel(10_000, call);
  const batches = [];
  for (let batch = 0; batch < 3; batch += 1) {
    const before = await cpu();
    await inParallel(CALLS, call);
    batches.push(((await cpu()) - before) * (1e6 / CALLS));
  }
  redis.disconnect();
  await server.kill();
  return batches;
}

const results = new Map(builds.map((build) => [build, []]));
for (let t = 0; t < TRIALS; t += 1) {
  for (const build of builds) results.get(build).push(...(await trial(build)));
}
for (const [build, batches] of results) {
  const mean = batches.reduce((a, b) => a + b, 0) / batches.length;
  process.stdout.write(
    `${build} prefill ${PREFILL}: Redis µs per call ${batches.map((b) => b.toFixed(1)).join(" ")}; mean ${mean.toFixed(1)}\n`,
  );
}
