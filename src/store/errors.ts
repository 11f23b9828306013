// The store's one failure as the rest of tollgate sees it: unreachable or too slow.

export class StoreUnavailableError extends Error {
  constructor(cause: unknown) {
    super("the store is unavailable", { cause });
    this.name = "StoreUnavailableError";
  }
}

/** Wraps every method of a port so that any store failure surfaces as StoreUnavailableError. */
export function guarded<T extends object>(port: T): T {
  const out: Record<string, unknown> = {};
  for (const [name, value] of Object.entries(port)) {
    out[name] =
      typeof value === "function"
        ? async (...args: unknown[]) => {
            try {
              return await (value as (...a: unknown[]) => Promise<unknown>)(...args);
            } catch (error) {
              throw error instanceof StoreUnavailableError ? error : new StoreUnavailableError(error);
            }
          }
        : value;
  }
  return out as T;
}
