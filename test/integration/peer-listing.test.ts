// The list of instances an announcement waits for ({invalidations}:peers) keeps each one listed as
// long as its own heartbeat said, whatever the others' REDIS_TIMEOUT_MS (and so their listings) are.
import { randomBytes } from "node:crypto";
import { afterAll, describe, expect, it } from "vitest";
import { scriptsOf } from "../../src/store/redis/loader.js";
import { connectRedis } from "../support/redis.js";

describe("the instances' listing", () => {
  const redis = connectRedis();
  afterAll(() => redis.disconnect());

  it("outlives a shorter listing written after a longer one, so the longer one is still waited for", async () => {
    const scripts = scriptsOf(redis);
    const channel = `test-peers-${randomBytes(4).toString("hex")}`;
    const peersKey = `{${channel}}:peers`;
    // An instance that may trust its cache for 5 s after its heartbeat (REDIS_TIMEOUT_MS=200), then
    // one with the default's 200 ms here, beating after it.
    await scripts.call(
      "peerBeat",
      [peersKey, `${peersKey}:count`],
      ["long/5000", 5000, `${channel}:alive:long`, "1"],
    );
    await scripts.call(
      "peerBeat",
      [peersKey, `${peersKey}:count`],
      ["short/200", 200, `${channel}:alive:short`, "1"],
    );
    await new Promise((resolve) => setTimeout(resolve, 400));
    // The long one still trusts its cache: an announcement must wait for it.
    const listed = await scripts.call(
      "announce",
      [peersKey, `${peersKey}:count`],
      [channel, "u:1", `${channel}:sync`, "x 1"],
    );
    expect(listed).toEqual(["long/5000"]);
    expect(await redis.pttl(peersKey)).toBeGreaterThan(4000);
  });
});
