// Ports whose every failure, or slowness past a deadline, surfaces as the one StoreUnavailableError.
import { withDeadline } from "../deadline.js";
import { StoreUnavailableError } from "../unavailable.js";

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
