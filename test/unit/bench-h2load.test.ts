// The bench's reading of h2load's output (bench/lib/h2load.mjs): its summary and its per-request log,
// from which the gRPC rows' rates and percentiles come. nghttp2 1.52's formats.
import { describe, expect, it } from "vitest";
import { parseH2loadLog, parseH2loadSummary } from "../../bench/lib/h2load.mjs";

const SUMMARY = `starting benchmark...
spawning thread #0: 4 total client(s). Timing-based test with 0s of warm-up time and 2s of main duration for measurements.
Application protocol: h2c

finished in 2.00s, 15224.00 req/s, 551.39KB/s
requests: 30448 total, 30512 started, 30448 done, 30440 succeeded, 8 failed, 3 errored, 1 timeout
status codes: 30496 2xx, 0 3xx, 0 4xx, 0 5xx
traffic: 1.08MB (1129256) total, 119.53KB (122396) headers (space savings 95.95%), 148.91KB (152480) data
`;

describe("h2load's output", () => {
  it("summary: the measured seconds and the requests given up on", () => {
    expect(parseH2loadSummary(SUMMARY)).toEqual({ seconds: 2, failed: 8, errored: 3, timeouts: 1 });
    expect(parseH2loadSummary(SUMMARY.replace("2.00s", "502.19ms")).seconds).toBeCloseTo(0.50219, 6);
  });

  it("a run that printed no summary is an error, not zero requests", () => {
    expect(() => parseH2loadSummary("connect to 127.0.0.1 failed\n")).toThrow(/no summary/);
  });

  it("log: latencies in ms and HTTP statuses; a request with no answer counted apart", () => {
    const log = [
      "1796429448547741\t200\t74078",
      "1796429448547742\t200\t1500",
      "1796429448547743\t503\t250",
      "1796429448547744\t-1\t9000",
      "",
    ].join("\n");
    const { latencies, statuses, unanswered } = parseH2loadLog(log);
    expect([...latencies]).toEqual([74.078, 1.5, 0.25]);
    expect(statuses).toEqual({ 200: 2, 503: 1 });
    expect(unanswered).toBe(1);
  });
});
