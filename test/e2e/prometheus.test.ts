// The dashboard and the rules against a real Prometheus: Debian's prometheus scrapes a real tollgate
// (on Redis, with RLS_CONFIG) every second and evaluates prometheus/rules/ every second, after a small
// load that makes every kind of series tollgate exports; then every panel query of grafana/tollgate.json
// and every rule expression goes through Prometheus's HTTP API and must return data. A panel on a
// metric tollgate does not export, or a recorded series no rule makes, fails here.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { grpcClients, rlsClient } from "../support/grpc-client.js";
import { login, send } from "../support/http-client.mjs";
import {
  dashboard,
  panelQueries,
  ruleFiles,
  rules,
  substitute,
  vectorSelectors,
} from "../support/observability.js";
import {
  type RedisServer,
  startRedisServer,
  startTollgate,
  type TollgateProcess,
} from "../support/processes.mjs";
import { parsePrometheus } from "../support/prometheus.js";
import { type PrometheusServer, startPrometheus } from "../support/prometheus-server.js";

/** The scrape job's name: the one the compose stack uses, and TollgateDown's selector. */
const JOB = "tollgate";
/**
 * What Grafana puts for $__rate_interval: at least four scrape intervals (here 1 s). 30 s holds
 * the whole run, so that a series counted once, early in the load, still has two samples in it.
 */
const RATE_INTERVAL = "30s";
/** How long a query may take to return data after the load: a few scrapes and rule evaluations. */
const SETTLE_MS = 20_000;

const policy = (freeSearch: string) => `
tiers:
  anonymous: { general: 100/1h, search: 100/1h, login: 100/1h }
  free: { general: 100/1h, search: ${freeSearch} }
  pro: { general: 1000/1h, search: 200/1h }
  enterprise: { general: 10000/1h, search: 2000/1h }
routes:
  - { method: GET, path: /api/search, category: search }
  - { method: POST, path: /auth/login, category: login, token: none }
default: { category: general }
`;
// Five an hour: hits 1-4 are within, 5 near (past 80 %), 6 over, 7 over from the denial cache.
const RLS = `
domain: edge
descriptors:
  - key: remote_address
    rate_limit: { unit: hour, requests_per_unit: 5 }
`;

let dir: string;
let policyFile: string;
let rlsFile: string;
let redis: RedisServer;
let tollgate: TollgateProcess;
let prometheus: PrometheusServer;

const admin = (method: string, path: string) =>
  send(`${tollgate.adminUrl}${path}`, {
    method,
    headers: { authorization: `Bearer ${tollgate.adminToken}` },
  });

/** Statuses of Envoy checks of GET `path`, one after the other. */
async function envoyChecks(path: string, times: number, token?: string): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < times; i += 1) {
    const headers: Record<string, string> = token === undefined ? {} : { authorization: `Bearer ${token}` };
    out.push((await send(`${tollgate.checkUrl}/ext_authz${path}`, { headers })).status);
  }
  return out;
}

/** Logins, one of them refused by the lockout; returns alice's access token. */
async function logins(): Promise<string> {
  const alice = await login(tollgate.url, "alice");
  const failed = [];
  for (let i = 0; i < 4; i += 1) {
    const body = { username: "nobody_here", password: "guess" };
    failed.push((await send(`${tollgate.url}/auth/login`, { method: "POST", body })).status);
  }
  expect(failed).toEqual([401, 401, 401, 429]); // LOGIN_LOCKOUT=3/15m: the fourth is a lockout
  return alice.access_token;
}

/** Checks allowed and denied over Envoy's HTTP and gRPC checks and nginx's, one 429 from the denial cache. */
async function checks(token: string): Promise<void> {
  const grpc = grpcClients(tollgate.grpcUrl);
  try {
    const answer = await grpc.check({ path: "/api/products", headers: { authorization: `Bearer ${token}` } });
    expect(answer.status?.code ?? 0).toBe(0); // OK: allowed
  } finally {
    grpc.close();
  }
  expect(await envoyChecks("/api/products", 2, token)).toEqual([200, 200]);
  expect(await envoyChecks("/api/products", 1)).toEqual([401]);
  // search: 2 an hour for free; the second 429 comes from the denial cache.
  expect(await envoyChecks("/api/search", 4, token)).toEqual([200, 200, 429, 429]);
  const nginx = await send(`${tollgate.checkUrl}/nginx/auth`, {
    headers: {
      authorization: `Bearer ${token}`,
      "x-original-method": "GET",
      "x-original-uri": "/api/products",
    },
  });
  expect(nginx.status).toBe(200);
}

/** Rate limit service calls: within, near, over and cached over POST /json, one over gRPC. */
async function rlsCalls(): Promise<void> {
  const statuses = [];
  for (let i = 0; i < 7; i += 1) {
    const reply = await send(`${tollgate.checkUrl}/json`, {
      method: "POST",
      body: { domain: "edge", descriptors: [{ entries: [{ key: "remote_address", value: "192.0.2.7" }] }] },
    });
    statuses.push(reply.status);
  }
  expect(statuses).toEqual([200, 200, 200, 200, 200, 429, 429]);
  const grpc = rlsClient(tollgate.grpcUrl);
  try {
    const answer = await grpc.shouldRateLimit("edge", [{ entries: [["remote_address", "192.0.2.8"]] }]);
    expect(answer.overall_code).toBe(1); // OK
  } finally {
    grpc.close();
  }
}

/** A reload that changes the policy, then one refused for both files; the files are then put right. */
async function reloads(): Promise<void> {
  writeFileSync(policyFile, policy("3/1h"));
  expect((await admin("POST", "/admin/policy/reload")).status).toBe(200);
  writeFileSync(policyFile, "tiers: [");
  writeFileSync(rlsFile, "domain: edge\ndescriptors: [");
  expect((await admin("POST", "/admin/policy/reload")).status).toBe(422);
  writeFileSync(policyFile, policy("3/1h"));
  writeFileSync(rlsFile, RLS);
}

/** The small load: every kind of series tollgate exports, under the dashboard's and the rules' labels. */
async function load(): Promise<void> {
  const token = await logins();
  await checks(token);
  await rlsCalls();
  const logout = await send(`${tollgate.url}/auth/logout`, {
    method: "POST",
    headers: { authorization: `Bearer ${token}` },
  });
  expect(logout.status).toBe(200);
  await reloads();
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "tollgate-prometheus-"));
  policyFile = join(dir, "policy.yaml");
  rlsFile = join(dir, "rls", "edge.yaml");
  writeFileSync(policyFile, policy("2/1h"));
  mkdirSync(join(dir, "rls"));
  writeFileSync(rlsFile, RLS);
  redis = await startRedisServer();
  tollgate = await startTollgate({
    REDIS_URL: redis.url,
    POLICY_FILE: policyFile,
    RLS_CONFIG: join(dir, "rls"),
    LOGIN_LOCKOUT: "3/15m",
    LOG_LEVEL: "warn",
    // A busy test machine can hold a store call past the 15 ms and 100 ms defaults (a 503 where the
    // load expects a count): the exported series, not the deadlines, are what this file checks.
    RLS_TIMEOUT_MS: "2000",
    REDIS_TIMEOUT_MS: "2000",
  });
  prometheus = await startPrometheus({
    dir: join(dir, "prometheus"),
    jobs: { [JOB]: [`127.0.0.1:${tollgate.adminPort}`] },
    ruleFiles: ruleFiles(),
  });
  // Counters seen at 0 first, as in production: increase() counts a series' first sample as its start.
  expect(await withoutData([`up{job="${JOB}"} == 1`])).toEqual([]);
  await load();
}, 60_000);

afterAll(async () => {
  await prometheus?.stop();
  await tollgate?.stop();
  await redis?.stop();
  rmSync(dir, { recursive: true, force: true });
});

const hasData = (result: Awaited<ReturnType<PrometheusServer["query"]>>): boolean =>
  result.resultType === "vector" ? result.result.length > 0 : result.resultType !== "matrix";

/**
 * Evaluates each of `exprs` until it returns data, for at most SETTLE_MS in all (a series counted
 * late in the load needs a scrape or two, a recorded one a rule evaluation after that); returns the
 * ones that never did, with Prometheus's error when it refused one.
 */
async function withoutData(exprs: readonly string[]): Promise<string[]> {
  let pending = [...new Set(exprs)];
  const errors = new Map<string, string>();
  const deadline = Date.now() + SETTLE_MS;
  while (pending.length > 0 && Date.now() < deadline) {
    const answered = await Promise.all(
      pending.map(async (expr) => {
        try {
          return hasData(await prometheus.query(expr));
        } catch (error) {
          errors.set(expr, (error as Error).message);
          return false;
        }
      }),
    );
    pending = pending.filter((_, i) => !answered[i]);
    if (pending.length > 0) await new Promise((r) => setTimeout(r, 500));
  }
  return pending.map((expr) => (errors.has(expr) ? `${expr}: ${errors.get(expr)}` : expr));
}

describe("grafana/tollgate.json and prometheus/rules/ on a real Prometheus scraping a real tollgate", () => {
  it("loads every rule file, and evaluates every rule without an error", async () => {
    type Group = { rules: { name: string; health: string; lastError?: string }[] };
    let loaded: Group["rules"] = [];
    const deadline = Date.now() + SETTLE_MS;
    do {
      loaded = (await prometheus.api<{ groups: Group[] }>("/api/v1/rules")).groups.flatMap((g) => g.rules);
      if (loaded.length > 0 && loaded.every((r) => r.health === "ok")) break;
      await new Promise((r) => setTimeout(r, 500));
    } while (Date.now() < deadline);
    const names = rules().map((r) => r.record ?? r.alert);
    expect(loaded.map((r) => r.name).sort()).toEqual([...names].sort());
    expect(loaded.filter((r) => r.health !== "ok")).toEqual([]);
  });

  it("answers the job variable's query (label_values(tollgate_store_up, job)) with the scrape job", async () => {
    const jobs = await prometheus.api<string[]>(
      `/api/v1/label/job/values?match[]=${encodeURIComponent("tollgate_store_up")}`,
    );
    expect(jobs).toEqual([JOB]);
  });

  it("returns data for every query of every dashboard panel", async () => {
    const queries = panelQueries(dashboard()).map((q) =>
      substitute(q.expr, { job: JOB, rateInterval: RATE_INTERVAL }),
    );
    expect(queries.length).toBeGreaterThan(20);
    expect(await withoutData(queries)).toEqual([]);
  });

  // A query returns data as long as one value of its regex, or any series present at 0 from the
  // start, answers: a misspelt label value would go unseen above. Each matcher, each value of an
  // alternation, is checked here against what tollgate serves once the load has made every kind.
  it("exports every metric, label and label value that a panel, a recording rule or an alert selects", async () => {
    const samples = parsePrometheus(await (await fetch(`${tollgate.adminUrl}/metrics`)).text());
    const exprs = [...panelQueries(dashboard()).map((q) => q.expr), ...rules().map((r) => r.expr)];
    const selectors = [...new Set(exprs.flatMap((expr) => vectorSelectors(expr)))];
    const missing: string[] = [];
    let checked = 0;
    for (const selector of selectors) {
      const [name = "", matchers = ""] = selector.split("{");
      // Recorded series are checked through their rules' expressions; up is Prometheus's own.
      if (name.includes(":") || name === "up") continue;
      const own = samples.filter((s) => s.name === name);
      if (own.length === 0) missing.push(selector);
      for (const [, label = "", op = "", value = ""] of matchers.matchAll(
        /(\w+)\s*(=~|!~|!=|=)\s*"([^"]*)"/g,
      )) {
        // job and instance are the scrape's; every other matcher names tollgate's labels and values.
        if (label === "job" || label === "instance") continue;
        for (const one of op.endsWith("~") ? value.split("|") : [value]) {
          checked += 1;
          if (!own.some((s) => s.labels[label] === one)) missing.push(`${selector}: no ${label}="${one}"`);
        }
      }
    }
    expect(checked).toBeGreaterThan(10);
    expect(missing).toEqual([]);
  });

  it("returns data for every recording rule", async () => {
    const recorded = rules().filter((r) => r.record !== undefined);
    expect(await withoutData(recorded.map((r) => r.expr))).toEqual([]);
    // And the series they record are there under their names, as the dashboard reads them.
    expect(await withoutData(recorded.map((r) => r.record as string))).toEqual([]);
  });

  // An alert's expression is its condition: when the condition is false (no store down, no spike
  // here), Prometheus rightly returns nothing. Those are evaluated as what they read instead: each
  // vector selector in them must return data, so that an alert on a metric (or a label value) that
  // tollgate does not export still fails. Conditions that hold under the load (the invalid reloads)
  // are checked as they are, and must be firing.
  it("returns data for every alert expression, or for each series it reads when its condition is false", async () => {
    const alerts = rules().filter((r) => r.alert !== undefined);
    const conditionFalse: string[] = [];
    for (const alert of alerts) {
      if (!hasData(await prometheus.query(alert.expr))) conditionFalse.push(alert.expr);
    }
    expect(conditionFalse.length).toBeGreaterThan(0);
    for (const expr of conditionFalse) expect(vectorSelectors(expr).length, expr).toBeGreaterThan(0);
    expect(await withoutData(conditionFalse.flatMap((expr) => vectorSelectors(expr)))).toEqual([]);
  });

  it("fires the reload alerts for the invalid reloads of the load, and no alert about tollgate's health", async () => {
    type Alert = { labels: { alertname: string }; state: string };
    let firing: string[] = [];
    const deadline = Date.now() + SETTLE_MS;
    do {
      const { alerts } = await prometheus.api<{ alerts: Alert[] }>("/api/v1/alerts");
      firing = alerts.filter((a) => a.state === "firing").map((a) => a.labels.alertname);
      if (firing.includes("TollgatePolicyReloadFailed") && firing.includes("TollgateRlsReloadFailed")) break;
      await new Promise((r) => setTimeout(r, 500));
    } while (Date.now() < deadline);
    expect(firing.sort()).toEqual(["TollgatePolicyReloadFailed", "TollgateRlsReloadFailed"]);
  });
});
