// What the public and admin APIs use of the store: its ports and its health, nothing of an adapter.
import type { SessionStore, UserStore } from "../auth/types.js";
import type { Limiter } from "../ratelimit/limiter.js";

export type ApiStore = {
  kind: "redis" | "memory";
  users: UserStore;
  sessions: SessionStore;
  /** Failures and slow answers surface as StoreUnavailableError. */
  limiter: Limiter;
  /** Whether the store answers within `timeoutMs`. */
  ping(timeoutMs: number): Promise<boolean>;
};
