// The services around the core for the default run: nginx, the upstream, the ceilings, the gRPC ground, tracing and the RLS.
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ROOT, startNginx, startUpstream } from "../../test/support/processes.mjs";
import { CHECK_METHOD, checkRequestBytes, grpcCall, startGrpcCeiling, writeBody } from "./grpc.mjs";
import { GRPC_CONNECTIONS, h2loadBinary } from "./h2load.mjs";
import { startRls } from "./rls.mjs";
import { BENCH_POLICY } from "./row-specs.mjs";
import { benchTollgate, KEY_PREFIX, startCeiling } from "./services.mjs";
import { BUILT_IN, bearer, HUGE_RULE } from "./setup.mjs";
import { startTracing } from "./tracing.mjs";

/**
 * An nginx of the bench, in the run's folder: "tollgate" is nginx/nginx.conf.template (auth_request to
 * tollgate), "direct" is bench/nginx-direct.conf.template (a plain reverse proxy to the upstream).
 */
const benchNginx = (kind, dir, workers) => ({
  name: `nginx (${kind})`,
  prefix: join(dir, `nginx-${kind}`),
  ...(kind === "tollgate" ? {} : { template: join(ROOT, "bench", "nginx-direct.conf.template") }),
  workers,
  // The production value the README recommends (above tollgate's REDIS_TIMEOUT_MS).
  checkTimeout: "1s",
});

/** The proxies, the upstream and the ceilings, on top of the core (redis-server and tollgate). */
export async function startAround(core, { dir, options }) {
  const upstream = await startUpstream();
  const workers = options.nginxWorkers;
  const nginxDirect = await startNginx({
    ...benchNginx("direct", dir, workers),
    upstreamPort: upstream.port,
  });
  const nginxTollgate = await startNginx({
    ...benchNginx("tollgate", dir, workers),
    checkPort: core.tollgate.checkPort,
    publicPort: core.tollgate.port,
    upstreamPort: upstream.port,
  });
  const httpCeiling = await startCeiling("http");
  const ownCeiling = await startCeiling("own", {}, "own http ceiling");
  // One window of HUGE_RULE per ceiling, each in a key of its own.
  const windowEnv = (tag) => ({
    REDIS_URL: core.redis.url,
    WINDOW_KEY: `${KEY_PREFIX}{${tag}}:w:general`,
    WINDOW_LIMIT: String(HUGE_RULE.limit),
    WINDOW_MS: String(HUGE_RULE.windowMs),
  });
  const storeCeiling = await startCeiling("store", windowEnv("ceiling"));
  const coalescedCeiling = await startCeiling(
    "store",
    { ...windowEnv("ceiling-coalesced"), COALESCE: "1" },
    "store ceiling (coalesced)",
  );
  const fixedFloor = await startCeiling("fixed", windowEnv("fixed"));
  // The same build with WORKERS=2 on the same Redis, users and policy: the core's tokens work on it.
  const policyFile = join(dir, "policy.yaml");
  const shared = { redisUrl: core.redis.url, policyFile, main: options.tollgateMain };
  const twoWorkers = await benchTollgate({
    ...shared,
    name: "tollgate (2 workers)",
    workers: 2,
    env: { DENIAL_CACHE_SIZE: "0" },
  });
  // The same build with its denial cache on (the default): refusals answered without Redis.
  const cached = await benchTollgate({ ...shared, name: "tollgate (denial cache)" });
  // --compare FILE: another build (e.g. main's, before a change) measured in the same run, on the
  // same policy, since the rules a check sends grow with the tiers; the built-in policy alone when
  // the build refuses the bench's (an older build may not know its algorithm tiers).
  let compare;
  if (options.compare !== undefined) {
    const start = (file) =>
      benchTollgate({
        ...shared,
        policyFile: file,
        main: options.compare,
        name: "tollgate (compare build)",
        env: { DENIAL_CACHE_SIZE: "0" },
      });
    try {
      compare = { ...(await start(policyFile)), policy: BENCH_POLICY };
    } catch (error) {
      // Said, not swallowed: a build that failed for another reason fails again on the built-in policy.
      const first = String(error?.message ?? error).split("\n")[0];
      process.stderr.write(
        `bench: the compare build did not start on the bench's policy (${first}); trying the built-in one\n`,
      );
      const comparePolicy = join(dir, "policy-compare.yaml");
      writeFileSync(comparePolicy, `# Written by bench/run.mjs from the built-in policy.\n${BUILT_IN}`);
      compare = { ...(await start(comparePolicy)), policy: "the built-in policy, as it refused the bench's" };
    }
  }
  const grpc = await startGrpc(core, dir, options.connections);
  // This build with tracing on: what a sampled share of checks costs, beside the allowed row.
  const tracing = await startTracing({ ...shared, ratio: options.traceRatio });
  return {
    tracing,
    nginxDirect,
    nginxTollgate,
    httpCeiling,
    ownCeiling,
    storeCeiling,
    coalescedCeiling,
    fixedFloor,
    twoWorkers,
    cached,
    compare,
    grpc,
    // A tollgate of its own, with RLS_CONFIG and its denial cache on (the core's is off).
    rls: await startRls(core, dir, grpc, options),
  };
}

/**
 * The gRPC rows' ground: h2load, the rows' request bodies (the allowed and denied rows' users in Envoy's
 * CheckRequest), the gRPC ceiling; or why the rows are skipped (the bench goes on without them).
 * Only the core tollgate is measured over gRPC: the compare build may predate the gRPC listener.
 */
async function startGrpc(core, dir, streams) {
  const h2load = h2loadBinary();
  if (h2load.missing !== undefined) return { skipped: h2load.missing };
  const request = (session) => checkRequestBytes({ path: "/api/products", headers: bearer(session) });
  const allowed = request(core.bob);
  const bodies = {
    allowed: writeBody(dir, "allowed", allowed),
    denied: writeBody(dir, "denied", request(core.alice)),
    // The ceiling reads the same request as the allowed row and answers an empty message.
    ceiling: writeBody(dir, "ceiling", allowed),
  };
  try {
    await grpcCall(core.tollgate.grpcUrl, CHECK_METHOD, readFileSync(bodies.allowed));
  } catch (error) {
    // A build without the gRPC listener (--tollgate an older one): nothing listens on GRPC_PORT.
    // node:http2 reports it as the stream's cancel, caused by the refused connection.
    if (error?.code !== "ECONNREFUSED" && error?.cause?.code !== "ECONNREFUSED") throw error;
    return {
      skipped: `the tollgate under test does not listen on GRPC_PORT (${(error.cause ?? error).message})`,
    };
  }
  const ceiling = await startGrpcCeiling();
  const connections = Math.min(GRPC_CONNECTIONS, streams);
  return { binary: h2load.path, bodies, ceiling, requestBytes: allowed.length, streams, connections };
}
