// The whole stack for an end-to-end test: tollgate on the shared Redis with a policy file of the
// test's own, the upstream, a real nginx in front, and the Envoy harness running the repository's
// envoy.yaml. Each stack takes a key prefix of its own, so test files running at once never share
// counters.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type EnvoyHarness, startEnvoyHarness } from "./envoy-harness.js";
import { closeClient } from "./http-client.mjs";
import {
  type Nginx,
  startNginx,
  startTollgate,
  startUpstream,
  type TollgateProcess,
  type UpstreamProcess,
} from "./processes.mjs";
import { redisUrl, testPrefix } from "./redis.js";

export type Stack = {
  tollgate: TollgateProcess;
  upstream: UpstreamProcess;
  nginx: Nginx;
  envoy: EnvoyHarness;
  /** The policy file tollgate reads: a test may rewrite it and reload. */
  policyFile: string;
  stop(): Promise<void>;
};

export type StackOptions = {
  /** The policy YAML tollgate starts with. */
  policy: string;
  /** More settings for tollgate (they win over the stack's own). */
  env?: Record<string, string>;
};

export async function startStack(options: StackOptions): Promise<Stack> {
  const dir = mkdtempSync(join(tmpdir(), "tollgate-stack-"));
  const policyFile = join(dir, "policy.yaml");
  writeFileSync(policyFile, options.policy);
  const started: { stop(): Promise<unknown> }[] = [];
  const stop = async () => {
    for (const part of started.reverse()) await part.stop();
    closeClient();
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    const [first, second] = await Promise.allSettled([
      startTollgate({
        REDIS_URL: redisUrl(),
        REDIS_KEY_PREFIX: testPrefix(),
        LOG_LEVEL: "warn",
        POLICY_FILE: policyFile,
        // A loaded two-core test machine must not turn exact counts into degraded allows.
        REDIS_TIMEOUT_MS: "2000",
        ...options.env,
      }),
      startUpstream(),
    ]);
    for (const result of [first, second]) if (result.status === "fulfilled") started.push(result.value);
    if (first.status === "rejected") throw first.reason;
    if (second.status === "rejected") throw second.reason;
    const [tollgate, upstream] = [first.value, second.value];
    const nginx = await startNginx({
      checkPort: tollgate.checkPort,
      publicPort: tollgate.port,
      upstreamPort: upstream.port,
    });
    started.push(nginx);
    // The repository's envoy.yaml; only its check timeout is relaxed for a loaded test machine.
    const envoy = await startEnvoyHarness({
      clusters: { tollgate_check: tollgate.checkUrl, tollgate_public: tollgate.url, upstream: upstream.url },
      checkTimeoutMs: 5_000,
    });
    started.push({ stop: () => envoy.close() });
    return { tollgate, upstream, nginx, envoy, policyFile, stop };
  } catch (error) {
    await stop();
    throw error;
  }
}
