// The check path's store deadline: one timer for many calls, expiring in arrival order.
import { describe, expect, it } from "vitest";
import {
  createDeadline,
  StoreTimeoutError,
  StoreUnavailableError,
  storeErrorText,
  withDeadline,
} from "../../src/store/failure.js";

const resolveAfter = <T>(ms: number, value: T): Promise<T> =>
  new Promise((r) => setTimeout(() => r(value), ms));
const never = new Promise<never>(() => {});

describe("createDeadline", () => {
  it("passes answers that arrive in time and rejects those that do not", async () => {
    const deadline = createDeadline(60);
    const outcomes = await Promise.allSettled([
      deadline(resolveAfter(5, "fast")),
      deadline(never),
      deadline(resolveAfter(20, "medium")),
      deadline(resolveAfter(200, "slow")),
      deadline(Promise.reject(new Error("store error"))),
    ]);
    expect(outcomes.map((o) => (o.status === "fulfilled" ? o.value : (o.reason as Error).name))).toEqual([
      "fast",
      "StoreTimeoutError",
      "medium",
      "StoreTimeoutError",
      "Error",
    ]);
  });

  it("gives every call its own deadline counted from when it started", async () => {
    const deadline = createDeadline(50);
    const first = deadline(never).catch((e: unknown) => e);
    await resolveAfter(30, null);
    const started = Date.now();
    const second = deadline(never).catch((e: unknown) => e);
    expect(await first).toBeInstanceOf(StoreTimeoutError);
    expect(await second).toBeInstanceOf(StoreTimeoutError);
    expect(Date.now() - started).toBeGreaterThanOrEqual(45);
  });

  it("keeps working after the queue empties and fills again", async () => {
    // Room for 1 ms timers that a loaded machine fires late: the calls that answer must never expire.
    const deadline = createDeadline(250);
    await expect(deadline(never)).rejects.toBeInstanceOf(StoreTimeoutError);
    await expect(deadline(resolveAfter(1, 1))).resolves.toBe(1);
    const many = await Promise.allSettled(
      Array.from({ length: 3000 }, (_, i) => deadline(i % 2 ? never : resolveAfter(1, i))),
    );
    expect(many.filter((o) => o.status === "fulfilled")).toHaveLength(1500);
  });
});

describe("withDeadline", () => {
  it("rejects a call slower than its deadline", async () => {
    await expect(withDeadline(never, 20)).rejects.toBeInstanceOf(StoreTimeoutError);
    await expect(withDeadline(resolveAfter(1, "ok"), 50)).resolves.toBe("ok");
  });
});

describe("storeErrorText", () => {
  it("tells a store failure in Redis's own words, not the wrapper's (start-up's store_down line)", () => {
    const oom = new Error("OOM command not allowed when used memory > 'maxmemory'.");
    expect(storeErrorText(new StoreUnavailableError(oom))).toBe(oom.message);
    expect(storeErrorText(new StoreUnavailableError(new StoreTimeoutError(1000)))).toBe(
      "the store did not answer within 1000 ms",
    );
    expect(storeErrorText(new Error("NOPERM no FCALL"))).toBe("NOPERM no FCALL");
  });
});
