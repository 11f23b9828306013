// Where a rate limit service answer must be envoyproxy/ratelimit's to the field, for an Envoy (or a
// client of POST /json) switched over from it: a real gRPC client against a tollgate process (dist/)
// on a real Redis. The reference's behaviour is cited from its source at the commit that
// docs/rls-config.md names (src/service/ratelimit.go, src/limiter/base_limiter.go, src/utils/).
import { randomBytes } from "node:crypto";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { grpcClients, type RlsClient, type RlsDescriptorInput, rlsClient } from "../support/grpc-client.js";
import { sleep } from "../support/in-process.js";
import { ROOT, startTollgate, type TollgateProcess } from "../support/processes.mjs";
import { parsePrometheus, sampleValue } from "../support/prometheus.js";
import { redisUrl, testPrefix } from "../support/redis.js";

const CONFIG = join(ROOT, "test/fixtures/rls/e2e/reference");
const OK = 1;
const OVER_LIMIT = 2;
const SERVING = 1;
const MINUTE_MS = 60_000;
const DAY_MS = 86_400_000;

const fresh = (): string => `v-${randomBytes(5).toString("hex")}`;
const one = (key: string, value: string, hitsAddend?: number): RlsDescriptorInput => ({
  entries: [[key, value]],
  ...(hitsAddend === undefined ? {} : { hits_addend: hitsAddend }),
});
const untilWindowEnd = (at: number, windowMs: number): number => windowMs - (at % windowMs);

/** Waits until at least `marginMs` remain of the epoch-aligned window of `windowMs`. */
async function clearOfBoundary(windowMs: number, marginMs: number): Promise<void> {
  const left = untilWindowEnd(Date.now(), windowMs);
  if (left < marginMs) await sleep(left + 50);
}

describe("the rate limit service answers as envoyproxy/ratelimit", () => {
  let proc: TollgateProcess;
  let rls: RlsClient;
  beforeAll(async () => {
    proc = await startTollgate({
      REDIS_URL: redisUrl(),
      REDIS_KEY_PREFIX: testPrefix(),
      REDIS_TIMEOUT_MS: "2000",
      RLS_TIMEOUT_MS: "2000",
      RLS_CONFIG: CONFIG,
      RLS_RESPONSE_HEADERS: "true",
    });
    rls = rlsClient(proc.grpcUrl);
  }, 30_000);
  afterAll(async () => {
    rls.close();
    await proc.stop("SIGKILL");
  });

  const remaining = async (descriptor: RlsDescriptorInput, requestAddend?: number) => {
    const answer = await rls.shouldRateLimit("reference", [descriptor], requestAddend);
    return [answer.overall_code, answer.statuses?.[0]?.limit_remaining ?? 0];
  };

  it("a descriptor's own hits_addend wins over the request's, and 0 looks without counting", async () => {
    // utils.GetHitsAddends: a descriptor's hits_addend is used when set, "It allows to be zero";
    // the request's applies only where a descriptor has none (and its 0 means 1).
    await clearOfBoundary(DAY_MS, 20_000);
    const value = fresh();
    expect(await remaining(one("daily", value, 0))).toEqual([OK, 5]);
    expect(await remaining(one("daily", value, 0), 3)).toEqual([OK, 5]);
    expect(await remaining(one("daily", value, 4), 1)).toEqual([OK, 1]);
    expect(await remaining(one("daily", value), 1)).toEqual([OK, 0]);
    // At the limit, not past it: a look is OK with nothing left, and counts nothing.
    expect(await remaining(one("daily", value, 0))).toEqual([OK, 0]);
    expect(await remaining(one("daily", value, 0))).toEqual([OK, 0]);
    expect(await remaining(one("daily", value))).toEqual([OVER_LIMIT, 0]);
    expect(await remaining(one("daily", value, 0))).toEqual([OVER_LIMIT, 0]);
    // POST /json reads it alike.
    const other = fresh();
    for (let i = 0; i < 2; i += 1) {
      const response = await fetch(`${proc.checkUrl}/json`, {
        method: "POST",
        body: JSON.stringify({
          domain: "reference",
          descriptors: [{ entries: [{ key: "daily", value: other }], hitsAddend: 0 }],
        }),
      });
      expect(response.status).toBe(200);
      expect(
        ((await response.json()) as { statuses: { limitRemaining: number }[] }).statuses[0],
      ).toMatchObject({
        limitRemaining: 5,
      });
    }
  });

  it("quota_mode: a quota-mode descriptor over its limit is reported OVER_LIMIT while the request passes", async () => {
    // service.shouldRateLimitWorker leaves every status as the cache answered it; quota_mode only
    // decides the overall code.
    const value = fresh();
    const both = () => rls.shouldRateLimit("reference", [one("qa", value), one("qb", value)]);
    expect((await both()).overall_code).toBe(OK);
    const second = await both();
    expect(second.overall_code).toBe(OK);
    expect(second.statuses?.map((s) => s.code)).toEqual([OVER_LIMIT, OK]);
    // An unlimited descriptor is no quota (the reference's limit for it is nil): qa is the
    // request's only quota-mode descriptor, and it is over.
    const withUnlimited = await rls.shouldRateLimit("reference", [one("qa", value), one("qfree", value)]);
    expect(withUnlimited.overall_code).toBe(OVER_LIMIT);
    expect(withUnlimited.statuses?.map((s) => s.code)).toEqual([OVER_LIMIT, OK]);
  });

  it("duration_until_reset is whole seconds to the window's end, rounded up, as Envoy reads it", async () => {
    // utils.CalculateReset: unit − now % unit, in whole seconds (never 0: Envoy's X-RateLimit-Reset
    // is duration_until_reset.seconds, so a rounded-down value would say 0 while it still refuses).
    await clearOfBoundary(MINUTE_MS, 3000);
    const value = fresh();
    for (let i = 0; i < 4; i += 1) {
      const before = Date.now();
      const answer = await rls.shouldRateLimit("reference", [one("minutely", value)]);
      const after = Date.now();
      expect(answer.overall_code).toBe(i < 3 ? OK : OVER_LIMIT);
      const reset = answer.statuses?.[0]?.duration_until_reset;
      expect(reset?.nanos).toBeUndefined();
      expect(reset?.seconds).toBeGreaterThanOrEqual(Math.ceil(untilWindowEnd(after, MINUTE_MS) / 1000));
      expect(reset?.seconds).toBeLessThanOrEqual(Math.ceil(untilWindowEnd(before, MINUTE_MS) / 1000));
      const headers = Object.fromEntries((answer.response_headers_to_add ?? []).map((h) => [h.key, h.value]));
      expect(headers["RateLimit-Reset"]).toBe(String(reset?.seconds));
    }
    // A look at a window nothing was counted in: still the window's end.
    const before = Date.now();
    const look = await rls.shouldRateLimit("reference", [one("minutely", fresh(), 0)]);
    expect(look.statuses?.[0]?.duration_until_reset?.seconds).toBeGreaterThanOrEqual(
      Math.ceil(untilWindowEnd(Date.now(), MINUTE_MS) / 1000),
    );
    expect(look.statuses?.[0]?.duration_until_reset?.seconds).toBeLessThanOrEqual(
      Math.ceil(untilWindowEnd(before, MINUTE_MS) / 1000),
    );
  });

  it("a limit of 0 refuses with the window's reset, and POST /json leaves its 0 out as protobuf does", async () => {
    await clearOfBoundary(MINUTE_MS, 3000);
    const before = Date.now();
    const answer = await rls.shouldRateLimit("reference", [one("zero", fresh())]);
    expect(answer.overall_code).toBe(OVER_LIMIT);
    expect(answer.statuses?.[0]?.current_limit).toEqual({ unit: 2 });
    const seconds = answer.statuses?.[0]?.duration_until_reset?.seconds ?? 0;
    expect(seconds).toBeGreaterThanOrEqual(Math.ceil(untilWindowEnd(Date.now(), MINUTE_MS) / 1000));
    expect(seconds).toBeLessThanOrEqual(Math.ceil(untilWindowEnd(before, MINUTE_MS) / 1000));
    const response = await fetch(`${proc.checkUrl}/json`, {
      method: "POST",
      body: JSON.stringify({
        domain: "reference",
        descriptors: [{ entries: [{ key: "zero", value: "x" }] }],
      }),
    });
    expect(response.status).toBe(429);
    const body = (await response.json()) as { statuses: Record<string, unknown>[] };
    expect(body.statuses[0]).toEqual({
      code: "OVER_LIMIT",
      currentLimit: { unit: "MINUTE" },
      durationUntilReset: expect.stringMatching(/^\d+s$/),
    });
  });

  it("RateLimit-* headers name the last descriptor over its limit, else the first with the least left", async () => {
    // service.shouldRateLimitWorker: the least limit_remaining among the statuses with a limit,
    // but a descriptor over its limit (not in quota mode) takes the headers, the last one so.
    await clearOfBoundary(DAY_MS, 20_000);
    const value = fresh();
    const call = async () => {
      const answer = await rls.shouldRateLimit("reference", [one("two", value), one("one", value)]);
      const headers = Object.fromEntries((answer.response_headers_to_add ?? []).map((h) => [h.key, h.value]));
      return [
        answer.statuses?.map((s) => s.code),
        headers["RateLimit-Limit"],
        headers["RateLimit-Remaining"],
      ];
    };
    expect(await call()).toEqual([[OK, OK], "1", "0"]);
    // two has 0 left and comes first, but one is over.
    expect(await call()).toEqual([[OK, OVER_LIMIT], "1", "0"]);
    // Both over: the last.
    expect(await call()).toEqual([[OVER_LIMIT, OVER_LIMIT], "1", "0"]);
  });

  it("counts a hit near its limit as the reference's near_limit: past 80 % of it, rounded down", async () => {
    // base_limiter.go: nearLimitThreshold = floor(limit × 0.8); near when the count is past it.
    // Of 5 a day: hits 1-4 within, 5 near.
    await clearOfBoundary(DAY_MS, 20_000);
    const hits = async () => {
      const response = await fetch(`${proc.adminUrl}/metrics`, {
        headers: { authorization: `Bearer ${proc.adminToken}` },
      });
      const samples = parsePrometheus(await response.text());
      const of = (result: string) =>
        sampleValue(samples, "tollgate_rls_hits_total", {
          domain: "reference",
          key: "reference.daily",
          result,
        }) ?? 0;
      return { within: of("within"), near: of("near") };
    };
    const before = await hits();
    const value = fresh();
    for (let i = 0; i < 5; i += 1) await rls.shouldRateLimit("reference", [one("daily", value)]);
    const after = await hits();
    expect({ within: after.within - before.within, near: after.near - before.near }).toEqual({
      within: 4,
      near: 1,
    });
  });

  it("is SERVING in the health service under the reference's name, ratelimit", async () => {
    // server_impl.go: NewHealthChecker(health.NewServer(), "ratelimit", …), what an Envoy
    // grpc_health_check or a Kubernetes gRPC probe written for the reference asks for.
    const grpc = grpcClients(proc.grpcUrl);
    try {
      expect(await grpc.health("ratelimit")).toEqual({ status: SERVING });
    } finally {
      grpc.close();
    }
  });
});
