// The load generator: autocannon's programmatic API, with our own latency record and status counts.
import { readFileSync } from "node:fs";
import autocannon from "autocannon";

function cannon(options, onResponse) {
  return new Promise((resolve, reject) => {
    const instance = autocannon({ ...options }, (error, result) => (error ? reject(error) : resolve(result)));
    if (onResponse !== undefined) instance.on("response", onResponse);
  });
}

/** Nearest-rank percentile of a sorted array. */
function percentile(sorted, q) {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))];
}

function statusCounts(result) {
  const statuses = {};
  for (const [status, { count: n }] of Object.entries(result.statusCodeStats ?? {})) statuses[status] = n;
  return statuses;
}

/**
 * Warms up, then measures one slice of a row. autocannon keeps its latencies in whole milliseconds,
 * so each response's own time (float ms, from its 'response' event) is recorded here, 4xx included.
 * `between` runs after the warm-up and before the measured run (stats resets, samplers).
 */
export async function measure({ url, method = "GET", headers = {}, connections, duration, warmup, between }) {
  const base = { url, method, headers, connections, pipelining: 1, timeout: 10 };
  if (warmup > 0) await cannon({ ...base, duration: warmup });
  if (between !== undefined) await between();
  let latencies = new Float64Array(1 << 16);
  let count = 0;
  const record = (_client, _status, _bytes, responseTime) => {
    if (count === latencies.length) {
      const grown = new Float64Array(latencies.length * 2);
      grown.set(latencies);
      latencies = grown;
    }
    latencies[count] = responseTime;
    count += 1;
  };
  const result = await cannon({ ...base, duration }, record);
  return {
    latencies: latencies.subarray(0, count),
    statuses: statusCounts(result),
    seconds: result.duration,
    errors: result.errors,
    timeouts: result.timeouts,
  };
}

/** Merges the slices of one row: requests over measured seconds, percentiles over every response. */
export function summarizeLoad(slices) {
  const count = slices.reduce((n, s) => n + s.latencies.length, 0);
  const sorted = new Float64Array(count);
  let at = 0;
  const statuses = {};
  for (const s of slices) {
    sorted.set(s.latencies, at);
    at += s.latencies.length;
    for (const [status, n] of Object.entries(s.statuses)) statuses[status] = (statuses[status] ?? 0) + n;
  }
  sorted.sort();
  const requests = Object.values(statuses).reduce((a, b) => a + b, 0);
  const seconds = slices.reduce((n, s) => n + s.seconds, 0);
  return {
    requests,
    seconds,
    rps: requests / seconds,
    p50: percentile(sorted, 0.5),
    p90: percentile(sorted, 0.9),
    p99: percentile(sorted, 0.99),
    max: count > 0 ? sorted[count - 1] : Number.NaN,
    statuses,
    errors: slices.reduce((n, s) => n + s.errors, 0),
    timeouts: slices.reduce((n, s) => n + s.timeouts, 0),
    slices: slices.length,
  };
}

/** A fixed number of requests, for the MONITOR samples and for exhausting a window. */
export async function burst({ url, method = "GET", headers = {}, connections, amount }) {
  const result = await cannon({ url, method, headers, connections, amount, timeout: 10 });
  const statuses = {};
  for (const [status, { count: n }] of Object.entries(result.statusCodeStats ?? {})) statuses[status] = n;
  return { statuses, errors: result.errors };
}

function rssKb(pid) {
  try {
    const match = /VmRSS:\s+(\d+)\s+kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
    return match === null ? undefined : Number(match[1]);
  } catch {
    return undefined;
  }
}

/** Peak and mean of the RSS samples of one or more slices, in MB. */
export function summarizeRss(sampleLists) {
  const samples = sampleLists.flat();
  if (samples.length === 0) return undefined;
  return {
    peakMb: Math.max(...samples) / 1024,
    meanMb: samples.reduce((a, b) => a + b, 0) / samples.length / 1024,
    samples: samples.length,
  };
}

/** Samples a process's resident set size (Linux /proc) until stopped; `stop()` returns the kB samples. */
export function sampleRss(pid, intervalMs = 200) {
  const samples = [];
  const take = () => {
    const kb = rssKb(pid);
    if (kb !== undefined) samples.push(kb);
  };
  take();
  const timer = setInterval(take, intervalMs);
  return {
    stop() {
      clearInterval(timer);
      take();
      return samples;
    },
  };
}

/**
 * measure() for a row whose load is split evenly over several servers (one tollgate process each):
 * one autocannon per URL with its share of the connections, run at once, merged into one slice.
 */
export async function measureSplit({
  urls,
  method = "GET",
  headers = {},
  connections,
  duration,
  warmup,
  between,
}) {
  const shares = urls.map((url, i) => ({
    url,
    method,
    headers,
    connections: Math.floor(connections / urls.length) + (i < connections % urls.length ? 1 : 0),
    pipelining: 1,
    timeout: 10,
  }));
  if (warmup > 0) await Promise.all(shares.map((base) => cannon({ ...base, duration: warmup })));
  if (between !== undefined) await between();
  const latencies = [];
  const results = await Promise.all(
    shares.map((base) =>
      cannon({ ...base, duration }, (_client, _status, _bytes, responseTime) => latencies.push(responseTime)),
    ),
  );
  const statuses = {};
  for (const result of results) {
    for (const [status, n] of Object.entries(statusCounts(result)))
      statuses[status] = (statuses[status] ?? 0) + n;
  }
  return {
    latencies: Float64Array.from(latencies),
    statuses,
    seconds: Math.max(...results.map((r) => r.duration)),
    errors: results.reduce((n, r) => n + r.errors, 0),
    timeouts: results.reduce((n, r) => n + r.timeouts, 0),
  };
}
