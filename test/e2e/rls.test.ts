// Envoy's rate limit service (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) end to
// end: a real gRPC client (@grpc/grpc-js over the same .proto files, not the server's own code)
// against tollgate's gRPC listener, on a real Redis; tollgate in this process where its parts are
// read, as processes of their own (dist/) for concurrency, store failures, reloads and start-up.
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  grpcClients,
  type RateLimitResponse,
  type RlsClient,
  type RlsDescriptorInput,
  rateLimitRequest,
  rlsClient,
} from "../support/grpc-client.js";
import { type InProcessOnRedis, sleep, startInProcess } from "../support/in-process.js";
import {
  freeTollgatePorts,
  type RedisServer,
  startRedisServer,
  startTollgate,
  type TollgateProcess,
  tollgateEnv,
} from "../support/processes.mjs";
import { parsePrometheus, sampleValue } from "../support/prometheus.js";
import { connectRedis, redisUrl, testPrefix } from "../support/redis.js";
import { ADMIN_TOKEN } from "../support/secrets.mjs";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const FIXTURES = join(ROOT, "test/fixtures/rls/e2e");
const SEMANTICS = join(FIXTURES, "semantics");

/** RateLimitResponse.Code */
const OK = 1;
const OVER_LIMIT = 2;
/** RateLimitResponse.RateLimit.Unit */
const Unit = { SECOND: 1, MINUTE: 2, HOUR: 3, DAY: 4, WEEK: 7 };
/** google.rpc.Code */
const Code = { INVALID_ARGUMENT: 3, NOT_FOUND: 5, UNIMPLEMENTED: 12, UNAVAILABLE: 14 };
/** grpc.health.v1.HealthCheckResponse.ServingStatus */
const SERVING = 1;
const MAX_UINT32 = 4_294_967_295;
const RLS_SERVICE = "envoy.service.ratelimit.v3.RateLimitService";

const MINUTE_MS = 60_000;
const HOUR_MS = 3_600_000;
const WEEK_MS = 604_800_000;

/** A value no other test (or earlier run on the shared Redis) has counted. */
const fresh = (stem = "v"): string => `${stem}-${randomBytes(5).toString("hex")}`;

const one = (key: string, value: string): RlsDescriptorInput => ({ entries: [[key, value]] });

const ms = (d: { seconds?: number; nanos?: number } | undefined): number | undefined =>
  d === undefined ? undefined : (d.seconds ?? 0) * 1000 + (d.nanos ?? 0) / 1e6;

/** The codes of an answer's statuses, in order (proto3 leaves nothing out: every code is set). */
const codes = (answer: RateLimitResponse): number[] => (answer.statuses ?? []).map((s) => s.code ?? 0);

/** Time (ms) until the epoch-aligned window of `windowMs` that holds `at` ends. */
const untilWindowEnd = (at: number, windowMs: number): number => windowMs - (at % windowMs);

/** Waits until at least `marginMs` remain of the epoch-aligned window of `windowMs`. */
async function clearOfBoundary(windowMs: number, marginMs: number): Promise<void> {
  const left = untilWindowEnd(Date.now(), windowMs);
  if (left < marginMs) await sleep(left + 50);
}

async function metricsOf(adminUrl: string) {
  const response = await fetch(`${adminUrl}/metrics`, {
    headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
  });
  expect(response.status).toBe(200);
  return parsePrometheus(await response.text());
}

const rlsHits = (samples: ReturnType<typeof parsePrometheus>, domain: string, key: string, result: string) =>
  sampleValue(samples, "tollgate_rls_hits_total", { domain, key, result }) ?? 0;

async function postJson(checkUrl: string, body: string | Buffer) {
  const response = await fetch(`${checkUrl}/json`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body,
  });
  return { status: response.status, body: (await response.json()) as Record<string, unknown> };
}

describe("ShouldRateLimit: the reference's semantics", () => {
  let tollgate: InProcessOnRedis;
  let rls: RlsClient;

  beforeAll(async () => {
    tollgate = await startInProcess({ env: { RLS_CONFIG: SEMANTICS, RLS_TIMEOUT_MS: "2000" } });
    rls = rlsClient(tollgate.grpcUrl);
  });
  afterAll(async () => {
    rls.close();
    await tollgate.close();
  });

  it("answers a status per descriptor in request order; OVER_LIMIT overall iff one is over", async () => {
    const user = fresh();
    const request = [
      one("unknown_key", "x"),
      one("hourly", user),
      one("free", user),
      {
        entries: [
          ["nested", "parent"],
          ["child", user],
        ],
      } as RlsDescriptorInput,
      one("weekly", user),
    ];
    const first = await rls.shouldRateLimit("e2e", request);
    expect(first.overall_code).toBe(OK);
    expect(first.statuses).toHaveLength(5);
    const [unmatched, hourly, free, nested, weekly] = first.statuses ?? [];
    // A descriptor that matches no limit: OK, nothing else.
    expect(unmatched).toEqual({ code: OK });
    expect(hourly).toMatchObject({
      code: OK,
      current_limit: { requests_per_unit: 5, unit: Unit.HOUR },
      limit_remaining: 4,
    });
    expect(hourly?.current_limit?.name).toBeUndefined();
    // Unlimited: OK, the most a uint32 holds, no current limit, no reset.
    expect(free).toEqual({ code: OK, limit_remaining: MAX_UINT32 });
    expect(nested).toMatchObject({ code: OK, current_limit: { requests_per_unit: 4, unit: Unit.DAY } });
    expect(nested?.limit_remaining).toBe(3);
    expect(weekly).toMatchObject({ code: OK, current_limit: { requests_per_unit: 2, unit: Unit.WEEK } });
    expect(weekly?.limit_remaining).toBe(1);

    const second = await rls.shouldRateLimit("e2e", request);
    expect(second.overall_code).toBe(OK);
    expect(second.statuses?.[4]?.limit_remaining).toBeUndefined(); // 0: proto3 sends nothing
    // The third is over on weekly only: OVER_LIMIT overall, every other descriptor still OK.
    const third = await rls.shouldRateLimit("e2e", request);
    expect(third.overall_code).toBe(OVER_LIMIT);
    expect(codes(third)).toEqual([OK, OK, OK, OK, OVER_LIMIT]);
    expect(third.statuses?.[1]?.limit_remaining).toBe(2);
    // And a request without it is OK again.
    const without = await rls.shouldRateLimit("e2e", [one("hourly", user)]);
    expect(without.overall_code).toBe(OK);
    expect(without.statuses?.[0]?.limit_remaining).toBe(1);
  });

  it("states the limit's name, and counts down limit_remaining to OVER_LIMIT", async () => {
    await clearOfBoundary(MINUTE_MS, 3000);
    const key = fresh();
    const remaining: (number | undefined)[] = [];
    for (let i = 0; i < 5; i += 1) {
      const answer = await rls.shouldRateLimit("e2e", [one("minutely", key)]);
      const status = answer.statuses?.[0];
      expect(status?.current_limit).toEqual({ name: "per_minute", requests_per_unit: 3, unit: Unit.MINUTE });
      remaining.push(status?.limit_remaining);
      expect(answer.overall_code).toBe(i < 3 ? OK : OVER_LIMIT);
    }
    expect(remaining).toEqual([2, 1, undefined, undefined, undefined]);
  });

  it.each([
    ["minutely", MINUTE_MS, 3],
    ["weekly", WEEK_MS, 2],
  ] as const)(
    "fixed-window (%s): duration_until_reset is the time to the epoch-aligned window's end in whole seconds, rounded up, allowed or denied",
    async (key, windowMs, limit) => {
      await clearOfBoundary(windowMs, 3000);
      const value = fresh();
      for (let i = 0; i <= limit; i += 1) {
        const before = Date.now();
        const answer = await rls.shouldRateLimit("e2e", [one(key, value)]);
        const after = Date.now();
        expect(answer.overall_code).toBe(i < limit ? OK : OVER_LIMIT);
        const reset = ms(answer.statuses?.[0]?.duration_until_reset) as number;
        expect(reset % 1000).toBe(0);
        expect(reset).toBeGreaterThanOrEqual(Math.ceil(untilWindowEnd(after, windowMs) / 1000) * 1000);
        expect(reset).toBeLessThanOrEqual(Math.ceil(untilWindowEnd(before, windowMs) / 1000) * 1000);
      }
    },
  );

  it("sliding-log: allowed, until the window is whole again (a window); denied, until the oldest request leaves", async () => {
    const value = fresh();
    const firstAt = Date.now();
    const allowed = [
      await rls.shouldRateLimit("e2e", [one("slog", value)]),
      await rls.shouldRateLimit("e2e", [one("slog", value)]),
    ];
    for (const answer of allowed) {
      expect(answer.overall_code).toBe(OK);
      const reset = ms(answer.statuses?.[0]?.duration_until_reset) as number;
      expect(reset).toBeGreaterThan(MINUTE_MS - 1000);
      expect(reset).toBeLessThanOrEqual(MINUTE_MS);
    }
    const denied = await rls.shouldRateLimit("e2e", [one("slog", value)]);
    const deniedAt = Date.now();
    expect(denied.overall_code).toBe(OVER_LIMIT);
    const reset = ms(denied.statuses?.[0]?.duration_until_reset) as number;
    // The first request leaves a minute after it was counted.
    expect(reset).toBeGreaterThanOrEqual(MINUTE_MS - (deniedAt - firstAt) - 20);
    expect(reset).toBeLessThanOrEqual(MINUTE_MS);
  });

  it("gcra: allowed, until the bucket is full again (one emission interval per use); denied, until the next conforms", async () => {
    const value = fresh();
    const interval = MINUTE_MS / 2;
    const firstAt = Date.now();
    const resets: number[] = [];
    for (let i = 0; i < 2; i += 1) {
      const answer = await rls.shouldRateLimit("e2e", [one("gcra", value)]);
      expect(answer.overall_code).toBe(OK);
      resets.push(ms(answer.statuses?.[0]?.duration_until_reset) as number);
    }
    const elapsed = () => Date.now() - firstAt;
    expect(resets[0]).toBeGreaterThan(interval - 1000);
    expect(resets[0]).toBeLessThanOrEqual(interval);
    expect(resets[1]).toBeGreaterThan(2 * interval - elapsed() - 20);
    expect(resets[1]).toBeLessThanOrEqual(2 * interval);
    const denied = await rls.shouldRateLimit("e2e", [one("gcra", value)]);
    expect(denied.overall_code).toBe(OVER_LIMIT);
    const reset = ms(denied.statuses?.[0]?.duration_until_reset) as number;
    expect(reset).toBeGreaterThanOrEqual(interval - elapsed() - 20);
    expect(reset).toBeLessThanOrEqual(interval);
  });

  it("sliding-counter: allowed, until the window is whole again; denied, until the weighted count drops below the limit", async () => {
    const value = fresh();
    for (let i = 0; i < 2; i += 1) {
      const answer = await rls.shouldRateLimit("e2e", [one("scount", value)]);
      expect(answer.overall_code).toBe(OK);
      const reset = ms(answer.statuses?.[0]?.duration_until_reset) as number;
      expect(reset).toBeGreaterThan(0);
      expect(reset).toBeLessThanOrEqual(2 * MINUTE_MS);
    }
    const denied = await rls.shouldRateLimit("e2e", [one("scount", value)]);
    expect(denied.overall_code).toBe(OVER_LIMIT);
    const reset = ms(denied.statuses?.[0]?.duration_until_reset) as number;
    expect(reset).toBeGreaterThan(0);
    expect(reset).toBeLessThanOrEqual(2 * MINUTE_MS);
  });

  it("a descriptor repeated in one request counts twice, the repeat after the first, in every algorithm", async () => {
    // As the reference's INCRBY per descriptor: the second of two equal descriptors sees the first's hit.
    for (const key of ["slog", "scount", "gcra"]) {
      const value = fresh();
      const first = await rls.shouldRateLimit("e2e", [one(key, value), one(key, value)]);
      expect(codes(first), key).toEqual([OK, OK]);
      expect(
        first.statuses?.map((s) => s.limit_remaining ?? 0),
        key,
      ).toEqual([1, 0]);
      const second = await rls.shouldRateLimit("e2e", [one(key, value), one(key, value)]);
      expect(codes(second), key).toEqual([OVER_LIMIT, OVER_LIMIT]);
    }
    const value = fresh();
    const fixed = await rls.shouldRateLimit("e2e", [one("hourly", value), one("hourly", value)]);
    expect(fixed.statuses?.map((s) => s.limit_remaining)).toEqual([4, 3]);
    const after = await rls.shouldRateLimit("e2e", [one("hourly", value)]);
    expect(after.statuses?.[0]?.limit_remaining).toBe(2);
  });

  it("hits_addend: counts a request as that many hits; 0 means 1", async () => {
    const value = fresh();
    const three = await rls.shouldRateLimit("e2e", [one("hourly", value)], 3);
    expect(three.statuses?.[0]?.limit_remaining).toBe(2);
    const zero = await rls.shouldRateLimit("e2e", [one("hourly", value)], 0);
    expect(zero.statuses?.[0]?.limit_remaining).toBe(1);
    const over = await rls.shouldRateLimit("e2e", [one("hourly", value)], 2);
    expect(over.overall_code).toBe(OVER_LIMIT);
  });

  it("a refusal of more hits than are left is answered alike by the process that gave it and by another", async () => {
    const peer = await startInProcess({
      peerOf: tollgate,
      env: { RLS_CONFIG: SEMANTICS, RLS_TIMEOUT_MS: "2000" },
    });
    const peerRls = rlsClient(peer.grpcUrl);
    try {
      const [here, there] = [fresh(), fresh()];
      for (const value of [here, there]) {
        expect((await rls.shouldRateLimit("e2e", [one("hourly", value)], 4)).overall_code).toBe(OK);
        // Two hits, one left: refused here.
        expect((await rls.shouldRateLimit("e2e", [one("hourly", value)], 2)).overall_code).toBe(OVER_LIMIT);
      }
      // One hit more: the store's answer, whichever process is asked (this one must not answer it
      // from its memory of the two-hit refusal).
      const again = await rls.shouldRateLimit("e2e", [one("hourly", here)]);
      const elsewhere = await peerRls.shouldRateLimit("e2e", [one("hourly", there)]);
      const gist = (a: RateLimitResponse) => [
        a.overall_code,
        a.statuses?.[0]?.code,
        a.statuses?.[0]?.limit_remaining,
      ];
      expect(gist(again)).toEqual(gist(elsewhere));
    } finally {
      peerRls.close();
      await peer.close();
    }
  });

  it("a descriptor's own limit wins over the configuration, and limits a descriptor that matches none", async () => {
    const value = fresh();
    const own = { requests_per_unit: 4, unit: Unit.HOUR };
    const answer = await rls.shouldRateLimit("e2e", [
      { entries: [["unconfigured", value]], limit: own },
      { entries: [["minutely", value]], limit: own },
    ]);
    expect(answer.overall_code).toBe(OK);
    for (const status of answer.statuses ?? []) {
      // The request's own limit: no name.
      expect(status.current_limit).toEqual({ requests_per_unit: 4, unit: Unit.HOUR });
      expect(status.limit_remaining).toBe(3);
      expect(ms(status.duration_until_reset)).toBeGreaterThan(0);
    }
    for (let i = 0; i < 3; i += 1) {
      await rls.shouldRateLimit("e2e", [{ entries: [["unconfigured", value]], limit: own }]);
    }
    const over = await rls.shouldRateLimit("e2e", [{ entries: [["unconfigured", value]], limit: own }]);
    expect(over.overall_code).toBe(OVER_LIMIT);
  });

  it("a refusal under a descriptor's own small limit says nothing of the same descriptor with a larger one", async () => {
    const value = fresh();
    const small = { requests_per_unit: 1, unit: Unit.MINUTE };
    const large = { requests_per_unit: 1000, unit: Unit.MINUTE };
    expect(
      (await rls.shouldRateLimit("e2e", [{ entries: [["unconfigured", value]], limit: small }])).overall_code,
    ).toBe(OK);
    expect(
      (await rls.shouldRateLimit("e2e", [{ entries: [["unconfigured", value]], limit: small }])).overall_code,
    ).toBe(OVER_LIMIT);
    // The denial cache holds the refusal under 1 a minute; 1000 a minute is the store's to answer.
    const bigger = await rls.shouldRateLimit("e2e", [{ entries: [["unconfigured", value]], limit: large }]);
    expect(bigger.overall_code).toBe(OK);
    // Three hits counted: a fixed window counts the refused one too, as the reference does.
    expect(bigger.statuses?.[0]?.limit_remaining).toBe(997);
  });

  it("quota_mode: its descriptors refuse only when every one of them is over", async () => {
    const value = fresh();
    const both = () => rls.shouldRateLimit("e2e", [one("qa", value), one("qb", value)]);
    expect((await both()).overall_code).toBe(OK);
    // qa is over, qb is not: allowed, qa reported as counted (OVER_LIMIT), as the reference does.
    const second = await both();
    expect(codes(second)).toEqual([OVER_LIMIT, OK]);
    expect(second.overall_code).toBe(OK);
    // Alone, qa is every quota-mode descriptor of the request: refused.
    expect((await rls.shouldRateLimit("e2e", [one("qa", value)])).overall_code).toBe(OVER_LIMIT);
  });

  it("more than 64 descriptors, or 32 entries in one: INVALID_ARGUMENT, before anything is counted", async () => {
    const many = Array.from({ length: 65 }, () => one("hourly", fresh()));
    const tooMany = await rls.callError(rateLimitRequest("e2e", many));
    expect(tooMany.code).toBe(Code.INVALID_ARGUMENT);
    const wide = [{ entries: Array.from({ length: 33 }, (_, i) => [`k${i}`, "v"] as [string, string]) }];
    expect((await rls.callError(rateLimitRequest("e2e", wide))).code).toBe(Code.INVALID_ARGUMENT);
  });

  it("shadow_mode: counted and reported, never OVER_LIMIT", async () => {
    const value = fresh();
    const before = rlsHits(await metricsOf(tollgate.adminUrl), "e2e", "e2e.shadow", "shadow");
    const answers = [];
    for (let i = 0; i < 3; i += 1) answers.push(await rls.shouldRateLimit("e2e", [one("shadow", value)]));
    expect(answers.map((a) => a.overall_code)).toEqual([OK, OK, OK]);
    expect(answers.map((a) => a.statuses?.[0]?.code)).toEqual([OK, OK, OK]);
    expect(answers[0]?.statuses?.[0]).toMatchObject({
      current_limit: { requests_per_unit: 1, unit: Unit.HOUR },
    });
    expect(answers.map((a) => a.statuses?.[0]?.limit_remaining)).toEqual([undefined, undefined, undefined]);
    const after = rlsHits(await metricsOf(tollgate.adminUrl), "e2e", "e2e.shadow", "shadow");
    expect(after - before).toBe(2);
  });

  it("replaces: the replaced limit is dropped from the request (OK, no current_limit, not counted)", async () => {
    const value = fresh();
    for (let i = 0; i < 3; i += 1) {
      const answer = await rls.shouldRateLimit("e2e", [one("user", value), one("plan", "premium")]);
      expect(answer.overall_code).toBe(OK);
      expect(answer.statuses?.[0]).toEqual({ code: OK });
      expect(answer.statuses?.[1]?.current_limit).toEqual({
        name: "premium",
        requests_per_unit: 100,
        unit: Unit.HOUR,
      });
    }
    // per_user counted none of them.
    const alone = await rls.shouldRateLimit("e2e", [one("user", value)]);
    expect(alone.statuses?.[0]).toMatchObject({ code: OK, limit_remaining: 1 });
  });

  it.each([
    ["e2e", "each descriptor counts on its own (the default)", 10 - 3 - 1],
    ["e2e-aon", "all_or_none: a refused request consumes nothing of the others", 10 - 2 - 1],
  ] as const)("%s: %s", async (domain, _what, bLeft) => {
    const value = fresh();
    const request = [one("a", value), one("b", value)];
    const answers = [];
    for (let i = 0; i < 3; i += 1) answers.push(await rls.shouldRateLimit(domain, request));
    expect(answers.map((a) => a.overall_code)).toEqual([OK, OK, OVER_LIMIT]);
    expect(codes(answers[2] as RateLimitResponse)).toEqual([OVER_LIMIT, OK]);
    // Once over (the denial cache answers a), the same again.
    const fourth = await rls.shouldRateLimit(domain, request);
    expect(codes(fourth)).toEqual([OVER_LIMIT, OK]);
    const b = await rls.shouldRateLimit(domain, [one("b", value)]);
    expect(b.statuses?.[0]?.limit_remaining).toBe(domain === "e2e" ? bLeft - 1 : bLeft);
  });

  it("an unknown domain: OK for every descriptor, without a limit", async () => {
    const answer = await rls.shouldRateLimit("no-such-domain", [one("hourly", "x"), one("a", "y")]);
    expect(answer).toEqual({ overall_code: OK, statuses: [{ code: OK }, { code: OK }] });
  });

  it("an empty domain or no descriptors: INVALID_ARGUMENT", async () => {
    const noDomain = await rls.callError({
      domain: "",
      descriptors: [{ entries: [{ key: "a", value: "b" }] }],
    });
    expect(noDomain.code).toBe(Code.INVALID_ARGUMENT);
    expect(noDomain.details).toMatch(/domain/);
    const noDescriptors = await rls.callError({ domain: "e2e", descriptors: [] });
    expect(noDescriptors.code).toBe(Code.INVALID_ARGUMENT);
    expect(noDescriptors.details).toMatch(/descriptor/);
  });

  it("is SERVING in the health service", async () => {
    const grpc = grpcClients(tollgate.grpcUrl);
    try {
      expect(await grpc.health(RLS_SERVICE)).toEqual({ status: SERVING });
    } finally {
      grpc.close();
    }
  });

  describe("POST /json on the check port", () => {
    it("answers the RateLimitResponse in protobuf's JSON mapping, 200 when OK and 429 when over", async () => {
      await clearOfBoundary(MINUTE_MS, 3000);
      const value = fresh();
      const body = JSON.stringify({
        domain: "e2e",
        descriptors: [{ entries: [{ key: "minutely", value }] }],
      });
      const first = await postJson(tollgate.checkUrl, body);
      expect(first.status).toBe(200);
      expect(first.body).toMatchObject({
        overallCode: "OK",
        statuses: [
          {
            code: "OK",
            currentLimit: { name: "per_minute", requestsPerUnit: 3, unit: "MINUTE" },
            limitRemaining: 2,
          },
        ],
      });
      const status = (first.body.statuses as { durationUntilReset: string }[])[0];
      expect(status?.durationUntilReset).toMatch(/^\d+(\.\d+)?s$/);
      const seconds = Number.parseFloat(status?.durationUntilReset ?? "");
      expect(seconds).toBeGreaterThan(0);
      expect(seconds).toBeLessThanOrEqual(60);
      // It counts like a gRPC call: two more, and the next is over.
      await rls.shouldRateLimit("e2e", [one("minutely", value)]);
      await postJson(tollgate.checkUrl, body);
      const over = await postJson(tollgate.checkUrl, body);
      expect(over.status).toBe(429);
      expect(over.body).toMatchObject({ overallCode: "OVER_LIMIT", statuses: [{ code: "OVER_LIMIT" }] });
    });

    it("400 for a body that is not JSON or not UTF-8, or a request without a domain or descriptors", async () => {
      const notUtf8 = Buffer.concat([
        Buffer.from('{"domain":"e2e","descriptors":[{"entries":[{"key":"minutely","value":"'),
        Buffer.from([0xff]),
        Buffer.from('"}]}]}'),
      ]);
      for (const body of [
        notUtf8,
        "{not json",
        JSON.stringify({ descriptors: [{ entries: [{ key: "a", value: "b" }] }] }),
        JSON.stringify({ domain: "e2e", descriptors: [] }),
        JSON.stringify({ domain: "e2e" }),
      ]) {
        const answer = await postJson(tollgate.checkUrl, body);
        expect(answer.status, String(body)).toBe(400);
        expect(answer.body.error, String(body)).toBe("bad_request");
      }
    });
  });
});

describe("RLS_RESPONSE_HEADERS=true", () => {
  it("adds RateLimit-Limit, -Remaining and -Reset for the descriptor closest to its limit", async () => {
    const tollgate = await startInProcess({
      env: { RLS_CONFIG: SEMANTICS, RLS_RESPONSE_HEADERS: "true", RLS_TIMEOUT_MS: "2000" },
    });
    const rls = rlsClient(tollgate.grpcUrl);
    try {
      await clearOfBoundary(MINUTE_MS, 3000);
      const value = fresh();
      const before = Date.now();
      const answer = await rls.shouldRateLimit("e2e", [one("hourly", value), one("minutely", value)]);
      const headers = Object.fromEntries((answer.response_headers_to_add ?? []).map((h) => [h.key, h.value]));
      expect(Object.keys(headers).sort()).toEqual([
        "RateLimit-Limit",
        "RateLimit-Remaining",
        "RateLimit-Reset",
      ]);
      // minutely (3, 2 left) is closer to its limit than hourly (5, 4 left).
      expect(headers["RateLimit-Limit"]).toBe("3");
      expect(headers["RateLimit-Remaining"]).toBe("2");
      const reset = Number(headers["RateLimit-Reset"]);
      expect(Math.abs(reset - Math.floor(untilWindowEnd(before, MINUTE_MS) / 1000))).toBeLessThanOrEqual(1);
    } finally {
      rls.close();
      await tollgate.close();
    }
  });
});

describe("without RLS_CONFIG", () => {
  it("offers no rate limit service: health NOT_FOUND, calls UNIMPLEMENTED, /json 404", async () => {
    const tollgate = await startInProcess();
    const rls = rlsClient(tollgate.grpcUrl);
    const grpc = grpcClients(tollgate.grpcUrl);
    try {
      expect(await grpc.health(RLS_SERVICE)).toEqual({ code: Code.NOT_FOUND });
      expect(await grpc.health("ratelimit")).toEqual({ code: Code.NOT_FOUND });
      const call = await rls.callError({
        domain: "e2e",
        descriptors: [{ entries: [{ key: "a", value: "b" }] }],
      });
      expect(call.code).toBe(Code.UNIMPLEMENTED);
      const json = await postJson(tollgate.checkUrl, JSON.stringify({ domain: "e2e", descriptors: [] }));
      expect(json.status).toBe(404);
    } finally {
      rls.close();
      grpc.close();
      await tollgate.close();
    }
  });
});

describe.each(["fixed-window", "sliding-log", "sliding-counter", "gcra"] as const)(
  "exact under concurrency across two tollgate processes (%s)",
  (algorithm) => {
    const procs: TollgateProcess[] = [];
    beforeAll(async () => {
      const env = {
        REDIS_URL: redisUrl(),
        REDIS_KEY_PREFIX: testPrefix(),
        REDIS_TIMEOUT_MS: "2000",
        RLS_TIMEOUT_MS: "2000",
        RLS_CONFIG: join(FIXTURES, "exact"),
      };
      procs.push(await startTollgate(env), await startTollgate(env));
    }, 40_000);
    afterAll(async () => {
      await Promise.all(procs.map((proc) => proc.stop("SIGKILL")));
    });

    it("allows exactly 100 of 600 concurrent calls on a limit of 100 an hour", async () => {
      // A fixed window is aligned to the hour: no boundary may fall inside the test.
      await clearOfBoundary(HOUR_MS, 20_000);
      const clients = procs.map((proc) => rlsClient(proc.grpcUrl));
      const value = fresh();
      try {
        const answers = await Promise.all(
          Array.from({ length: 600 }, (_, i) =>
            (clients[i % 2] as RlsClient).shouldRateLimit("exact", [one(algorithm, value)]),
          ),
        );
        const overall = answers.map((a) => a.overall_code);
        expect(overall.filter((code) => code === OK)).toHaveLength(100);
        expect(overall.filter((code) => code === OVER_LIMIT)).toHaveLength(500);
        for (const answer of answers) {
          expect(answer.statuses?.[0]?.current_limit).toEqual({ requests_per_unit: 100, unit: Unit.HOUR });
        }
        // Every remaining count from 99 down to 0 was given out exactly once.
        const remaining = answers
          .filter((a) => a.overall_code === OK)
          .map((a) => a.statuses?.[0]?.limit_remaining ?? 0)
          .sort((x, y) => x - y);
        expect(remaining).toEqual(Array.from({ length: 100 }, (_, i) => i));
      } finally {
        for (const client of clients) client.close();
      }
    }, 60_000);
  },
);

describe("a store of its own", () => {
  let redisServer: RedisServer;
  let redis: Redis;
  beforeAll(async () => {
    redisServer = await startRedisServer();
    redis = connectRedis(redisServer.url);
  });
  afterAll(async () => {
    redis.disconnect();
    await redisServer.stop();
  });

  /**
   * How many times Redis was asked to count or read a limit, from INFO commandstats: scripts (FCALL,
   * EVALSHA) and the fixed window's INCRBY and GET (mode each counts it without a script), less the
   * process's invalidations heartbeat, an FCALL and a GET (of the announcements' count) too, counted
   * by the ZREMRANGEBYSCORE only it runs.
   */
  async function storeCalls(): Promise<number> {
    const info = await redis.info("commandstats");
    let calls = 0;
    for (const match of info.matchAll(
      /^cmdstat_(fcall|fcall_ro|evalsha|evalsha_ro|eval|incrby|get|zremrangebyscore):calls=(\d+)/gm,
    )) {
      calls += (match[1] === "zremrangebyscore" ? -2 : 1) * Number(match[2]);
    }
    return calls;
  }

  it("paused with CLIENT PAUSE: the call fails UNAVAILABLE within RLS_TIMEOUT_MS, and calls succeed once it ends", async () => {
    const proc = await startTollgate({
      REDIS_URL: redisServer.url,
      REDIS_KEY_PREFIX: testPrefix(),
      RLS_CONFIG: SEMANTICS,
      RLS_TIMEOUT_MS: "50",
    });
    const rls = rlsClient(proc.grpcUrl);
    try {
      const value = fresh();
      expect((await rls.shouldRateLimit("e2e", [one("hourly", value)])).overall_code).toBe(OK);
      const pausedAt = performance.now();
      expect(await redis.call("CLIENT", "PAUSE", "1500", "ALL")).toBe("OK");
      const failed = await rls.callError({
        domain: "e2e",
        descriptors: [{ entries: [{ key: "hourly", value }] }],
      });
      expect(failed.code).toBe(Code.UNAVAILABLE);
      expect(failed.ms).toBeLessThan(1000);
      // A descriptor that needs no store is still answered.
      expect(await rls.shouldRateLimit("e2e", [one("free", value)])).toMatchObject({ overall_code: OK });
      await sleep(Math.max(0, pausedAt + 1500 + 100 - performance.now()));
      // (A fresh descriptor: the INCRBY of the call that timed out was sent, and Redis runs it once
      // the pause ends, as it would the reference's.)
      const next = fresh();
      const after = [];
      for (let i = 0; i < 6; i += 1) after.push(await rls.shouldRateLimit("e2e", [one("hourly", next)]));
      expect(after.map((a) => a.overall_code)).toEqual([OK, OK, OK, OK, OK, OVER_LIMIT]);
      expect(after.map((a) => a.statuses?.[0]?.limit_remaining ?? 0)).toEqual([4, 3, 2, 1, 0, 0]);
    } finally {
      await redis.call("CLIENT", "UNPAUSE").catch(() => undefined);
      rls.close();
      await proc.stop("SIGKILL");
    }
  }, 30_000);

  // A deployment that uses only Envoy's rate limit filter has no check to report the store back:
  // the calls themselves must, or TollgateStoreDown fires on for good after the first outage.
  it("a store outage seen only by rate limit calls: tollgate_store_up goes to 0 and back to 1, and no check counts as degraded", async () => {
    const proc = await startTollgate({
      REDIS_URL: redisServer.url,
      REDIS_KEY_PREFIX: testPrefix(),
      RLS_CONFIG: SEMANTICS,
      RLS_TIMEOUT_MS: "50",
      FAILURE_MODE: "open",
    });
    const rls = rlsClient(proc.grpcUrl);
    const gauges = async () => {
      const samples = await metricsOf(proc.adminUrl);
      return {
        up: sampleValue(samples, "tollgate_store_up"),
        errors: sampleValue(samples, "tollgate_store_errors_total", { operation: "hit" }),
        degraded: sampleValue(samples, "tollgate_degraded_total"),
      };
    };
    try {
      expect((await rls.shouldRateLimit("e2e", [one("hourly", fresh())])).overall_code).toBe(OK);
      const pausedAt = performance.now();
      expect(await redis.call("CLIENT", "PAUSE", "1000", "ALL")).toBe("OK");
      const failed = await rls.callError({
        domain: "e2e",
        descriptors: [{ entries: [{ key: "hourly", value: fresh() }] }],
      });
      expect(failed.code).toBe(Code.UNAVAILABLE);
      // Down, and nothing was allowed without the store: the call failed, whatever FAILURE_MODE says.
      expect(await gauges()).toEqual({ up: 0, errors: 1, degraded: 0 });
      // Past the pause, and past the second without a failure that store_recovered waits for.
      await sleep(Math.max(0, pausedAt + 1000 + 300 - performance.now()));
      expect((await rls.shouldRateLimit("e2e", [one("hourly", fresh())])).overall_code).toBe(OK);
      expect(await gauges()).toEqual({ up: 1, errors: 1, degraded: 0 });
      expect(proc.output()).toContain('"event":"store_recovered"');
    } finally {
      await redis.call("CLIENT", "UNPAUSE").catch(() => undefined);
      rls.close();
      await proc.stop("SIGKILL");
    }
  }, 30_000);

  it("the denial cache: once over, OVER_LIMIT without a store call until the window frees, counted as cached", async () => {
    const prefix = testPrefix();
    const proc = await startTollgate({
      REDIS_URL: redisServer.url,
      REDIS_KEY_PREFIX: prefix,
      RLS_CONFIG: join(FIXTURES, "cache"),
      RLS_TIMEOUT_MS: "2000",
    });
    const rls = rlsClient(proc.grpcUrl);
    try {
      // The cache is trusted once the process hears its own heartbeat, which lists it among the
      // instances in the same step (docs/check.md); a beat lost at start is sent again a second later.
      const listed = `${prefix}{invalidations}:peers`;
      for (const until = Date.now() + 5_000; (await redis.zcard(listed)) === 0 && Date.now() < until; )
        await sleep(20);
      await sleep(100);
      const value = fresh();
      const call = () => rls.shouldRateLimit("cache", [one("client", value)]);
      // Start at the beginning of a 3-second window, so that all of this fits in it.
      await sleep(untilWindowEnd(Date.now(), 3000) + 20);
      const windowEnd = Date.now() - (Date.now() % 3000) + 3000;
      const allowed = [await call(), await call(), await call()];
      expect(allowed.map((a) => a.overall_code)).toEqual([OK, OK, OK]);
      const before = await storeCalls();
      const refused = await call();
      expect(refused.overall_code).toBe(OVER_LIMIT);
      expect(await storeCalls()).toBe(before + 1);
      const metricsBefore = await metricsOf(proc.adminUrl);
      const cached = [];
      for (let i = 0; i < 20; i += 1) cached.push(await call());
      expect(Date.now()).toBeLessThan(windowEnd);
      expect(cached.map((a) => a.overall_code)).toEqual(Array(20).fill(OVER_LIMIT));
      for (const answer of cached) {
        const reset = ms(answer.statuses?.[0]?.duration_until_reset) as number;
        expect(reset).toBeGreaterThan(0);
        expect(reset).toBeLessThanOrEqual(3000);
      }
      expect(await storeCalls()).toBe(before + 1);
      const metricsAfter = await metricsOf(proc.adminUrl);
      expect(rlsHits(metricsAfter, "cache", "cache.client", "cached")).toBe(
        rlsHits(metricsBefore, "cache", "cache.client", "cached") + 20,
      );
      expect(rlsHits(metricsAfter, "cache", "cache.client", "over")).toBe(1);
      // The window frees: the store is asked again, and allows.
      await sleep(Math.max(0, windowEnd - Date.now() + 50));
      const freed = await call();
      expect(freed.overall_code).toBe(OK);
      expect(await storeCalls()).toBe(before + 2);
    } finally {
      rls.close();
      await proc.stop("SIGKILL");
    }
  }, 30_000);
});

const STEADY = `# the reloads test's configuration
domain: reload
descriptors:
  - key: steady
    rate_limit: { unit: hour, requests_per_unit: 1000000 }
  - key: changed
    rate_limit: { unit: hour, requests_per_unit: 5 }
`;

describe("reloading RLS_CONFIG under load", () => {
  let proc: TollgateProcess;
  let rls: RlsClient;
  let file: string;
  beforeAll(async () => {
    const dir = mkdtempSync(join(tmpdir(), "tollgate-rls-reload-"));
    file = join(dir, "reload.yaml");
    writeFileSync(file, STEADY);
    proc = await startTollgate({
      REDIS_URL: redisUrl(),
      REDIS_KEY_PREFIX: testPrefix(),
      RLS_CONFIG: file,
      RLS_TIMEOUT_MS: "2000",
      REDIS_TIMEOUT_MS: "2000",
    });
    rls = rlsClient(proc.grpcUrl);
  }, 30_000);
  afterAll(async () => {
    rls.close();
    await proc.stop("SIGKILL");
  });

  const adminRls = async () => {
    const response = await fetch(`${proc.adminUrl}/admin/rls`, {
      headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
    });
    expect(response.status).toBe(200);
    return (await response.json()) as { version: string; files: string[]; domains: { domain: string }[] };
  };
  const reloads = async (result: string) =>
    sampleValue(await metricsOf(proc.adminUrl), "tollgate_rls_config_reloads_total", { result }) ?? 0;
  const limitOf = async (key: string, value: string) =>
    (await rls.shouldRateLimit("reload", [one(key, value)])).statuses?.[0]?.current_limit?.requests_per_unit;
  /** Log lines (JSON) of `event` written since `from` (an offset in the output). */
  const events = (event: string, from: number) =>
    proc
      .output()
      .slice(from)
      .split("\n")
      .filter((line) => line.includes(`"event":"${event}"`))
      .map((line) => JSON.parse(line) as Record<string, unknown>);

  /** Calls `steady` in a loop until stopped: every answer must be OK with its limit. */
  function loadLoop() {
    let running = true;
    let calls = 0;
    const wrong: string[] = [];
    const value = fresh();
    const done = (async () => {
      while (running) {
        try {
          const answer = await rls.shouldRateLimit("reload", [one("steady", value)]);
          const status = answer.statuses?.[0];
          if (answer.overall_code !== OK || status?.current_limit?.requests_per_unit !== 1_000_000) {
            wrong.push(JSON.stringify(answer));
          }
        } catch (error) {
          wrong.push(String(error));
        }
        calls += 1;
      }
    })();
    return {
      async stop() {
        running = false;
        await done;
        return { calls, wrong };
      },
    };
  }

  async function within<T>(ms: number, probe: () => Promise<T>, wanted: T): Promise<T> {
    const until = Date.now() + ms;
    let last = await probe();
    while (last !== wanted && Date.now() < until) {
      await sleep(50);
      last = await probe();
    }
    return last;
  }

  it("applies a valid change within a couple of seconds, keeps the old one on an invalid file, with no call failing", async () => {
    const value = fresh();
    const versionBefore = (await adminRls()).version;
    expect(await limitOf("changed", value)).toBe(5);
    expect(await limitOf("added", value)).toBeUndefined();
    // `changed` over its 5 (four more, the last answered from the denial cache): the raised limit
    // below must free it.
    const over = [];
    for (let i = 0; i < 6; i += 1)
      over.push((await rls.shouldRateLimit("reload", [one("changed", value)])).overall_code);
    expect(over).toEqual([OK, OK, OK, OK, OVER_LIMIT, OVER_LIMIT]);
    const loop = loadLoop();
    try {
      // (a) A valid change: a new key, and a new requests_per_unit.
      writeFileSync(
        file,
        `${STEADY.replace("requests_per_unit: 5", "requests_per_unit: 9")}  - key: added\n    rate_limit: { unit: minute, requests_per_unit: 7 }\n`,
      );
      expect(await within(3000, () => limitOf("added", value), 7)).toBe(7);
      // The refusal the denial cache held is gone with the old limit: the same count, now of 9.
      const raised = await rls.shouldRateLimit("reload", [one("changed", value)]);
      expect(raised.overall_code).toBe(OK);
      expect(raised.statuses?.[0]?.current_limit?.requests_per_unit).toBe(9);
      const view = await adminRls();
      expect(view.version).not.toBe(versionBefore);
      expect(view.files).toEqual(["reload.yaml"]);
      expect(JSON.stringify(view)).toContain('"key":"added"');

      // (b) An invalid file: the configuration in force stays, and the log says file:line and field.
      const invalidBefore = await reloads("invalid");
      const from = proc.output().length;
      writeFileSync(
        file,
        `${STEADY}  - key: broken\n    rate_limit: { unit: minutes, requests_per_unit: 1 }\n`,
      );
      const logged = await within(3000, async () => events("rls_config_invalid", from).length, 1);
      expect(logged).toBe(1);
      const [line] = events("rls_config_invalid", from);
      expect(line?.problems).toEqual([
        expect.stringMatching(/^reload\.yaml:9: descriptors\[2\]\.rate_limit\.unit: unknown unit "minutes"/),
      ]);
      expect(await reloads("invalid")).toBe(invalidBefore + 1);
      expect(await limitOf("added", value)).toBe(7);
      expect(await limitOf("changed", value)).toBe(9);
      expect((await adminRls()).version).toBe(view.version);

      // A valid file again.
      writeFileSync(file, STEADY);
      expect(await within(3000, () => limitOf("added", value), undefined)).toBeUndefined();
      expect(await limitOf("changed", value)).toBe(5);
      expect((await adminRls()).version).toBe(versionBefore);
    } finally {
      const { calls, wrong } = await loop.stop();
      expect(wrong).toEqual([]);
      expect(calls).toBeGreaterThan(20);
    }
  }, 30_000);

  it.each([
    ["SIGHUP", "signal"],
    ["POST /admin/policy/reload", "admin"],
  ] as const)("%s reloads it at once", async (_how, trigger) => {
    const value = fresh();
    const from = proc.output().length;
    const changedBefore = await reloads("changed");
    const requests = trigger === "signal" ? 11 : 12;
    writeFileSync(file, STEADY.replace("requests_per_unit: 5", `requests_per_unit: ${requests}`));
    // Before the watch's settling time (200 ms) is up: the reload is this one's.
    if (trigger === "signal") {
      proc.child.kill("SIGHUP");
    } else {
      const response = await fetch(`${proc.adminUrl}/admin/policy/reload`, {
        method: "POST",
        headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
      });
      expect(response.status).toBe(200);
    }
    expect(await within(1000, () => limitOf("changed", value), requests)).toBe(requests);
    const reloaded = events("rls_config_reloaded", from);
    expect(reloaded[0]).toMatchObject({ trigger, changed: true });
    expect(await reloads("changed")).toBe(changedBefore + 1);
    // The watch's own reload finds nothing new, and says nothing.
    await sleep(400);
    expect(events("rls_config_reloaded", from)).toHaveLength(1);
    writeFileSync(file, STEADY);
    expect(await within(3000, () => limitOf("changed", value), 5)).toBe(5);
  });
});

describe("start-up with an invalid RLS_CONFIG", () => {
  it("stops with exit 1 and one line per problem, RLS_CONFIG: file:line: field", async () => {
    const child = spawn(process.execPath, ["dist/src/main.js"], {
      cwd: ROOT,
      env: {
        ...tollgateEnv(await freeTollgatePorts()),
        RLS_CONFIG: join(ROOT, "test/fixtures/rls/invalid/many_problems.yaml"),
      },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stderr = "";
    let stdout = "";
    child.stdout.on("data", (d: Buffer) => {
      stdout += d.toString();
    });
    child.stderr.on("data", (d: Buffer) => {
      stderr += d.toString();
    });
    const code = await new Promise<number | null>((resolve) => child.once("exit", resolve));
    expect(code, stdout + stderr).toBe(1);
    const lines = stderr.trim().split("\n");
    expect(lines).toEqual([
      expect.stringMatching(
        /^tollgate: RLS_CONFIG: many_problems\.yaml:5: descriptors\[0\]\.rate_limit\.unit: unknown unit "fortnight"/,
      ),
      "tollgate: RLS_CONFIG: many_problems.yaml:6: descriptors[0].rate_limit.requests_per_unit: -5 is out of range (0 to 4294967295)",
      "tollgate: RLS_CONFIG: many_problems.yaml:7: descriptors[1].key: required",
      'tollgate: RLS_CONFIG: many_problems.yaml:12: descriptors[2].rate_limit.algorithm: unknown algorithm "token-bucket" (fixed-window, sliding-log, sliding-counter, gcra)',
      expect.stringMatching(
        /^tollgate: RLS_CONFIG: many_problems\.yaml:15: descriptors\[2\]\.descriptors\[0\]\.colour: unknown field/,
      ),
    ]);
    expect(stdout).not.toContain('"event":"ready"');
  });
});
