// A deadline on a store call that measures the store, not a busy event loop.

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
