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
