// The store's one failure as the rest of tollgate sees it: unreachable or too slow (answered 503).

export class StoreUnavailableError extends Error {
  constructor(cause: unknown) {
    super("the store is unavailable", { cause });
    this.name = "StoreUnavailableError";
  }
}
