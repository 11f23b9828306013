// A throwaway Prometheus (Debian's `prometheus`) on a free loopback port: a config of the test's own
// that scrapes the given targets every second and evaluates the repository's rule files every second.
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { stringify } from "yaml";
import { findBinary } from "./binaries.js";
import { freePort, waitFor } from "./local.mjs";
import { type RunningProcess, startProcess } from "./processes.mjs";

export type QueryResult =
  | { resultType: "vector"; result: { metric: Record<string, string>; value: [number, string] }[] }
  | { resultType: "scalar" | "string"; result: [number, string] }
  | { resultType: "matrix"; result: unknown[] };

export type PrometheusServer = RunningProcess & {
  url: string;
  /** An instant query through the HTTP API; a query Prometheus refuses throws with its error. */
  query(expr: string): Promise<QueryResult>;
  /** GET an API path (`/api/v1/rules`, …) and return its `data`. */
  api<T>(path: string): Promise<T>;
};

export async function startPrometheus(options: {
  /** A folder of the test's own: the config and the TSDB go there. */
  dir: string;
  /** Scrape jobs: job name → "host:port" targets of their /metrics. */
  jobs: Record<string, string[]>;
  ruleFiles: readonly string[];
}): Promise<PrometheusServer> {
  const binary = findBinary("prometheus");
  const port = await freePort();
  const config = join(options.dir, "prometheus.yml");
  mkdirSync(join(options.dir, "data"), { recursive: true });
  writeFileSync(
    config,
    stringify({
      global: { scrape_interval: "1s", scrape_timeout: "1s", evaluation_interval: "1s" },
      rule_files: options.ruleFiles,
      scrape_configs: Object.entries(options.jobs).map(([job, targets]) => ({
        job_name: job,
        static_configs: [{ targets }],
      })),
    }),
  );
  const proc = startProcess({
    name: "prometheus",
    command: binary,
    args: [
      `--config.file=${config}`,
      `--storage.tsdb.path=${join(options.dir, "data")}`,
      `--web.listen-address=127.0.0.1:${port}`,
      "--log.level=warn",
    ],
  });
  const url = `http://127.0.0.1:${port}`;
  const api = async <T>(path: string): Promise<T> => {
    const response = await fetch(`${url}${path}`);
    const body = (await response.json()) as { status: string; data: T; error?: string };
    if (body.status !== "success") throw new Error(`${path}: ${body.error ?? response.status}`);
    return body.data;
  };
  try {
    await waitFor(async () => (await fetch(`${url}/-/ready`)).ok, 15_000, `prometheus on ${port}`, proc);
  } catch (error) {
    await proc.stop("SIGKILL");
    throw error;
  }
  return {
    ...proc,
    url,
    api,
    query: (expr) => api<QueryResult>(`/api/v1/query?query=${encodeURIComponent(expr)}`),
  };
}
