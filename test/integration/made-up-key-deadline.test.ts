// A made-up API key's check takes a second store call (counting the address, as any bad credential
// is counted), and never waits past REDIS_TIMEOUT_MS for both together: on a real Redis, with the
// second call held back to outlast the check's deadline.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { newApiKey } from "../../src/auth/api-keys.js";
import { createCredentialReader } from "../../src/auth/credentials.js";
import { createChecker } from "../../src/check/checker.js";
import { compilePolicy } from "../../src/policy/compile.js";
import { DEFAULT_POLICY_YAML, parsePolicy } from "../../src/policy/policy.js";
import type { Limiter } from "../../src/ratelimit/limiter.js";
import { createRedisStore, type Store } from "../../src/store/store.js";
import { type InProcess, startInProcess } from "../support/in-process.js";
import { connectRedis, testPrefix } from "../support/redis.js";

const TIMEOUT_MS = 600;

describe("a made-up API key's check on Redis", () => {
  let store: Store;
  let running: InProcess;
  beforeAll(async () => {
    store = createRedisStore({ redis: connectRedis(), prefix: testPrefix() });
    running = await startInProcess({ store, demoUsers: false, env: { LOG_LEVEL: "silent" } });
  });
  afterAll(async () => {
    await running?.close();
  });

  /** A checker on the store's own limiter, whose n-th call's answer is held back `holdMs[n - 1]` ms. */
  const checker = (holdMs: number[]) => {
    const inner = store.unguarded.limiter;
    let calls = 0;
    const limiter: Limiter = {
      ...inner,
      limit: (request) => {
        const hold = holdMs[calls] ?? 0;
        calls += 1;
        const answer = inner.limit(request);
        if (hold === 0) return answer;
        return answer.then((value) => new Promise((resolve) => setTimeout(() => resolve(value), hold)));
      },
    };
    const check = createChecker({
      policy: () => compilePolicy(parsePolicy(DEFAULT_POLICY_YAML, "default")),
      credentials: createCredentialReader({ tokens: running.tollgate.tokens, provider: undefined }),
      limiter,
      failureMode: "open",
      timeoutMs: TIMEOUT_MS,
      idleMs: 60_000,
      onStoreError: () => undefined,
      onStoreOk: () => undefined,
    });
    return { check, calls: () => calls };
  };

  /** One check with a well-formed key tollgate never issued, from `ip`. */
  const madeUp = (check: ReturnType<typeof checker>["check"], ip: string) =>
    check({ method: "GET", path: "/api/products", authorization: undefined, apiKey: newApiKey().key, ip });

  it("counts the key's check against the address in a second call when the store answers in time", async () => {
    const { check, calls } = checker([]);
    const decision = await madeUp(check, "198.51.100.77");
    expect(decision).toMatchObject({ kind: "deny", status: 401, description: "API key unknown or revoked" });
    expect(calls()).toBe(2);
  });

  it("answers the key's 401 within REDIS_TIMEOUT_MS, both calls together, when the store is slow", async () => {
    // The first call answers in time but late; the second would outlast a deadline of its own.
    const { check, calls } = checker([(2 * TIMEOUT_MS) / 3, 3 * TIMEOUT_MS]);
    const started = performance.now();
    const decision = await madeUp(check, "198.51.100.78");
    const waited = performance.now() - started;
    expect(decision).toMatchObject({ kind: "deny", status: 401, description: "API key unknown or revoked" });
    expect(calls()).toBe(2);
    // The bound is the whole check's, both calls together; a slack for the timer and the loop.
    expect(waited).toBeLessThan(TIMEOUT_MS + 250);
  });
});
