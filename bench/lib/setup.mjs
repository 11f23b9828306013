// The bench's fixed ground: its policy, the machine it ran on, and a tollgate with users logged in.
import { execFileSync, spawnSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import os from "node:os";
import { join } from "node:path";
import { DEFAULT_POLICY_YAML } from "../../dist/src/policy/policy.js";
import { login, send } from "../../test/support/http-client.mjs";
import { findBinary } from "../../test/support/local.mjs";
import { ROOT, startRedisServer } from "../../test/support/processes.mjs";
import { benchApiKey, idpEnv, providerToken, startBenchIdp } from "./identity.mjs";
import { connectRedis } from "./redis-stats.mjs";
import { benchTollgate, createUser } from "./services.mjs";

// A limit that the bench never fills (the policy caps counts at 1,000,000): a window never holds more
// than `rate × 10 s` entries, so the allowed, anonymous and nginx rows really are all allowed.
export const HUGE = "1000000/10s";
export const HUGE_RULE = { limit: 1_000_000, windowMs: 10_000 };
/**
 * The built-in policy (its routes and free's limits) with every other tier's limits made huge: free's
 * 100/1h stays, to be exhausted for the 429 row. Built from the default so the two cannot drift apart.
 */
export const BUILT_IN = DEFAULT_POLICY_YAML.replace(/^(\s*(?:anonymous|pro|enterprise):.*)$/gm, (line) =>
  line.replace(/\d+\/\d+[smhd]/g, HUGE),
);
/** Tiers of the bench's own, one per algorithm: huge limits for the allowed rows, one an hour for the denied. */
const ALGORITHM_TIERS = ["sliding-counter", "gcra"].flatMap((algorithm) => {
  const name = algorithm === "gcra" ? "gcra" : "counter";
  const all = (limit) =>
    `{ algorithm: ${algorithm}, general: ${limit}, search: ${limit}, orders: ${limit}, account: ${limit} }`;
  return [`  bench_${name}: ${all(HUGE)}`, `  bench_${name}_low: ${all("1/1h")}`];
});
export const POLICY = `# Written by bench/run.mjs from the built-in policy.\n${BUILT_IN.replace(
  /^tiers:\n/m,
  `tiers:\n${ALGORITHM_TIERS.join("\n")}\n`,
)}`;

export const bearer = (session) => ({ authorization: `Bearer ${session.access_token}` });
export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export function machineInfo(options) {
  const cpus = os.cpus();
  const nginx = spawnSync(findBinary("nginx", ["/usr/sbin/nginx"]), ["-v"], { encoding: "utf8" });
  const autocannon = JSON.parse(readFileSync(join(ROOT, "node_modules/autocannon/package.json"), "utf8"));
  const redis = execFileSync(findBinary("redis-server"), ["--version"], { encoding: "utf8" });
  return {
    cpuModel: cpus[0]?.model.trim() ?? "unknown",
    cpuCount: cpus.length,
    totalMemGb: os.totalmem() / 1024 ** 3,
    os: `${os.type()} ${os.release()} ${os.arch()}`,
    node: process.version,
    redis: redis.trim().split(" sha=")[0],
    nginx: `${nginx.stderr}${nginx.stdout}`.trim(),
    autocannon: autocannon.version,
    loadAverage: os.loadavg(),
    ...options,
  };
}

/**
 * redis-server, a tollgate on the bench policy, and the demo users logged in: bob_pro (pro) for the
 * allowed row, ent_carol (enterprise) for nginx, alice (free) for the 429 row.
 */
export async function startCore({ dir, options, nodeArgs = [], policy = POLICY, denialCache = false }) {
  const redis = await startRedisServer();
  const redisClient = connectRedis(redis.url);
  const policyFile = join(dir, "policy.yaml");
  writeFileSync(policyFile, policy);
  // The identity provider of the provider-token rows: tollgate accepts its tokens beside its own.
  const idp = await startBenchIdp();
  // Without the denial cache: every row measures the store call (a cached row has a tollgate of its own;
  // `denialCache` gives the profile of that row one with the cache on).
  const tollgate = await benchTollgate({
    redisUrl: redis.url,
    policyFile,
    main: options.tollgateMain,
    nodeArgs,
    env: { ...idpEnv(idp), ...(denialCache ? {} : { DENIAL_CACHE_SIZE: "0" }) },
  });
  const [bob, carol, alice] = [
    await login(tollgate.url, "bob_pro"),
    await login(tollgate.url, "ent_carol"),
    await login(tollgate.url, "alice"),
  ];
  // One user per algorithm tier: huge limits (allowed rows) and one an hour (denied rows).
  const byAlgorithm = {};
  for (const tier of policy === POLICY
    ? ["bench_counter", "bench_counter_low", "bench_gcra", "bench_gcra_low"]
    : []) {
    const password = await createUser(tollgate.adminUrl, tier, tier);
    byAlgorithm[tier] = await login(tollgate.url, tier, password);
  }
  // Pro users of their own for the rows set beside the allowed row (the compare build's, tracing on):
  // a sliding log's cost depends on what its list holds, so each row counts in a list of its own.
  const peers = {};
  for (const name of ["bench_compare", "bench_traced"]) {
    const password = await createUser(tollgate.adminUrl, name, "pro");
    peers[name] = await login(tollgate.url, name, password);
  }
  const checkUrl = `${tollgate.checkUrl}/ext_authz/api/products`;
  // A provider subject (EXTERNAL_DEFAULT_TIER pro) and a pro API key: the allowed row's limits.
  const external = { idp, token: providerToken(idp, "bench-subject"), apiKey: await benchApiKey(tollgate) };
  return { redis, redisClient, tollgate, bob, carol, alice, byAlgorithm, peers, checkUrl, external };
}

/** Spends the free user's 100/1h so that every later check of theirs is a 429. */
export async function exhaust(url, headers) {
  for (let i = 0; i < 200; i += 1) {
    const { status } = await send(url, { headers });
    if (status === 429) return;
    if (status !== 200) throw new Error(`exhausting the free user's window: unexpected ${status}`);
  }
  throw new Error("the free user's window did not fill after 200 checks");
}

/** One request before the load, so that a wrong setup fails the bench instead of measuring errors. */
export async function expectStatus(what, url, headers, expected) {
  const reply = await send(url, { headers });
  if (reply.status !== expected) {
    throw new Error(
      `preflight of "${what}": expected ${expected}, got ${reply.status} ${reply.text.slice(0, 300)}`,
    );
  }
}
