// The store's one failure as the rest of tollgate sees it: unreachable, or slower than a deadline
// that measures the store, not a busy event loop. Ports wrapped by `guarded` surface every failure
// as StoreUnavailableError (answered 503); the check path puts its own deadline on each call
// (`createDeadline`) and degrades per FAILURE_MODE.

export class StoreUnavailableError extends Error {
  constructor(cause: unknown) {
    super("the store is unavailable", { cause });
    this.name = "StoreUnavailableError";
  }
}

/** What went wrong, for a log: a StoreUnavailableError's cause (Redis's own words), not its wrapper. */
export const storeErrorText = (error: unknown): string =>
  String(
    ((error instanceof StoreUnavailableError ? error.cause : error) as Error | undefined)?.message ?? error,
  );

export class StoreTimeoutError extends Error {
  constructor(ms: number) {
    super(`the store did not answer within ${ms} ms`);
    this.name = "StoreTimeoutError";
  }
}

/**
 * Settles as `promise` does, or rejects with StoreTimeoutError after `ms`. When the timer fires the
 * decision waits for one setImmediate: a reply that already sits in the socket (the loop was busy,
 * not the store) is read in the poll phase before it, so a CPU burst does not degrade checks that
 * Redis answered in time.
 */
export function withDeadline<T>(promise: Promise<T>, ms: number): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    let settled = false;
    const timer = setTimeout(() => {
      setImmediate(() => {
        if (settled) return;
        settled = true;
        reject(new StoreTimeoutError(ms));
      });
    }, ms);
    promise.then(
      (value) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        resolve(value);
      },
      (error: unknown) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        reject(error);
      },
    );
  });
}

type Pending = { at: number; done: boolean; reject: (error: Error) => void };

/**
 * withDeadline for a stream of calls that all share one deadline (the check path): one timer for
 * the whole queue instead of a setTimeout per call, since entries expire in arrival order.
 */
export function createDeadline(ms: number): <T>(promise: Promise<T>) => Promise<T> {
  let queue: (Pending | undefined)[] = [];
  let head = 0;
  let timer: NodeJS.Timeout | undefined;

  const arm = (): void => {
    while (head < queue.length && (queue[head] as Pending).done) queue[head++] = undefined;
    if (head > 1024 && head * 2 > queue.length) {
      queue = queue.slice(head);
      head = 0;
    }
    if (timer !== undefined || head >= queue.length) return;
    timer = setTimeout(fire, Math.max(0, (queue[head] as Pending).at - performance.now()));
  };
  // As in withDeadline: one setImmediate of grace, so replies already in the socket are read first.
  const fire = (): void => {
    setImmediate(expire);
  };
  const expire = (): void => {
    timer = undefined;
    // A monotonic clock: a wall-clock step must neither expire nor prolong calls.
    const now = performance.now();
    while (head < queue.length) {
      const pending = queue[head] as Pending;
      if (!pending.done && pending.at > now) break;
      queue[head++] = undefined;
      if (!pending.done) {
        pending.done = true;
        pending.reject(new StoreTimeoutError(ms));
      }
    }
    arm();
  };

  return <T>(promise: Promise<T>): Promise<T> =>
    new Promise<T>((resolve, reject) => {
      const pending: Pending = { at: performance.now() + ms, done: false, reject };
      queue.push(pending);
      arm();
      promise.then(
        (value) => {
          if (pending.done) return;
          pending.done = true;
          resolve(value);
        },
        (error: unknown) => {
          if (pending.done) return;
          pending.done = true;
          reject(error);
        },
      );
    });
}

/**
 * Wraps every method of a port so that any store failure, or an answer slower than `timeoutMs`,
 * surfaces as StoreUnavailableError.
 */
export function guarded<T extends object>(port: T, timeoutMs: number): T {
  const out: Record<string, unknown> = {};
  for (const [name, value] of Object.entries(port)) {
    out[name] =
      typeof value === "function"
        ? async (...args: unknown[]) => {
            try {
              return await withDeadline((value as (...a: unknown[]) => Promise<unknown>)(...args), timeoutMs);
            } catch (error) {
              throw error instanceof StoreUnavailableError ? error : new StoreUnavailableError(error);
            }
          }
        : value;
  }
  return out as T;
}

/**
 * Every wait on the store, from REDIS_TIMEOUT_MS (a check's): the public and admin APIs, and a
 * (re)connection, may take longer than a check.
 */
export const storeTimeouts = (checkTimeoutMs: number) => ({
  apiMs: Math.max(1_000, checkTimeoutMs * 10),
  connectMs: Math.max(1_000, checkTimeoutMs * 10),
  /** A connection (or the invalidations' subscription) silent this long is dropped and made again. */
  watchdog: { intervalMs: 1_000, silenceMs: Math.max(3_000, checkTimeoutMs * 20) },
});
