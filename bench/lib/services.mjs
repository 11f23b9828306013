// What the bench runs beside the shared servers (test/support/processes.mjs): its tollgates' settings,
// the ceiling servers, users of its own tiers, and tollgate's counters.
import { join } from "node:path";
import { httpOk, send } from "../../test/support/http-client.mjs";
import { freePort, waitFor } from "../../test/support/local.mjs";
import { ROOT, startProcess, startTollgate } from "../../test/support/processes.mjs";
import { ADMIN_TOKEN } from "../../test/support/secrets.mjs";

export const KEY_PREFIX = "bench:";

/**
 * A tollgate of the bench (startTollgate) on its Redis and policy, with the bench's key prefix: ready
 * once it answers and the demo users are loaded; with `workers`, once every worker has logged that
 * it listens.
 */
export function benchTollgate({
  redisUrl,
  /** Instead of REDIS_URL: REDIS_CLUSTER_NODES, or REDIS_SENTINELS and REDIS_SENTINEL_MASTER. */
  redisEnv = { REDIS_URL: redisUrl },
  policyFile,
  main = "dist/src/main.js",
  nodeArgs = [],
  name = "tollgate",
  workers,
  /** More settings, e.g. DENIAL_CACHE_SIZE. */
  env = {},
}) {
  return startTollgate(
    {
      ...redisEnv,
      REDIS_KEY_PREFIX: KEY_PREFIX,
      POLICY_FILE: policyFile,
      // Info for the workers' "ready" lines; nothing on the check path logs at info when it allows.
      LOG_LEVEL: workers === undefined ? "warn" : "info",
      ...env,
    },
    // /ready alone would do for this build; the demo user check also covers older builds given by --tollgate.
    { readyMs: 30_000, main, nodeArgs, name, workers, waitForDemoUsers: true },
  );
}

/**
 * bench/ceiling-server.mjs: bare node:http ("http"), + one EVALSHA ("store"), + INCR/PEXPIRE ("fixed");
 * bench/own-ceiling-server.mjs ("own"): the check listener's own HTTP/1.1 server answering 200.
 */
export async function startCeiling(mode, env = {}, name = `${mode} ceiling`) {
  const port = await freePort();
  const proc = startProcess({
    name,
    command: process.execPath,
    args:
      mode === "own"
        ? [join(ROOT, "bench", "own-ceiling-server.mjs")]
        : [join(ROOT, "bench", "ceiling-server.mjs"), mode],
    env: { HOST: "127.0.0.1", PORT: String(port), ...env },
  });
  await waitFor(() => httpOk(`http://127.0.0.1:${port}/`), 10_000, `${mode} ceiling on ${port}`, proc);
  return { ...proc, port, url: `http://127.0.0.1:${port}` };
}

/** Creates a user through the admin API (the shared admin token), for a tier of the bench's own. */
export async function createUser(adminUrl, username, tier, password = "bench-password") {
  const reply = await send(`${adminUrl}/admin/users`, {
    method: "POST",
    headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
    body: { username, password, tier },
  });
  if (reply.status !== 201 && reply.status !== 409)
    throw new Error(`creating ${username} failed: ${reply.status} ${reply.text}`);
  return password;
}

/** The sum of tollgate's decision, degraded and store-error counters, from ADMIN_PORT /metrics. */
export async function tollgateCounters(adminUrl) {
  const reply = await send(`${adminUrl}/metrics`);
  if (reply.status !== 200) throw new Error(`tollgate /metrics answered ${reply.status}`);
  const sum = (name) => {
    let total = 0;
    for (const line of reply.text.split("\n")) {
      if (line.startsWith(`${name}{`) || line.startsWith(`${name} `)) total += Number(line.split(" ").pop());
    }
    return total;
  };
  return {
    decisions: sum("tollgate_decisions_total"),
    degraded: sum("tollgate_degraded_total"),
    storeErrors: sum("tollgate_store_errors_total"),
  };
}

/**
 * What a gRPC row's calls came to, from ADMIN_PORT /metrics: decisions by outcome ("allow ok",
 * "deny rate_limited", …), gRPC calls by method and status ("envoy.service.auth.v3.Authorization/Check OK")
 * and the rate limit service's descriptor hits by result ("within", "cached", …).
 * h2load sees HTTP statuses only; these say what the answers were.
 */
export async function tollgateOutcomes(adminUrl) {
  const reply = await send(`${adminUrl}/metrics`);
  if (reply.status !== 200) throw new Error(`tollgate /metrics answered ${reply.status}`);
  const decisions = {};
  const calls = {};
  const rlsHits = {};
  const label = (line, name) => new RegExp(`${name}="([^"]*)"`).exec(line)?.[1] ?? "";
  for (const line of reply.text.split("\n")) {
    const value = Number(line.split(" ").pop());
    if (line.startsWith("tollgate_decisions_total{")) {
      const key = `${label(line, "decision")} ${label(line, "reason")}`;
      decisions[key] = (decisions[key] ?? 0) + value;
    } else if (line.startsWith("tollgate_grpc_calls_total{")) {
      const key = `${label(line, "method")} ${label(line, "status")}`;
      calls[key] = (calls[key] ?? 0) + value;
    } else if (line.startsWith("tollgate_rls_hits_total{")) {
      const key = label(line, "result");
      rlsHits[key] = (rlsHits[key] ?? 0) + value;
    }
  }
  return { decisions, calls, rlsHits };
}

/**
 * An RLS row's counters, as tollgateCounters' for a check: its ShouldRateLimit calls (every gRPC
 * status) stand for the decisions, which the rate limit service does not count as checks.
 */
export async function rlsCounters(adminUrl) {
  const [{ calls }, { storeErrors }] = await Promise.all([
    tollgateOutcomes(adminUrl),
    tollgateCounters(adminUrl),
  ]);
  const shouldRateLimit = Object.entries(calls)
    .filter(([key]) => key.startsWith("envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit "))
    .reduce((n, [, count]) => n + count, 0);
  return { decisions: shouldRateLimit, degraded: 0, storeErrors };
}
