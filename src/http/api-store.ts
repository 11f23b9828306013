// What the public and admin APIs use of the store: its ports and its health, nothing of an adapter.
import type { ApiKeyStore, SubjectStore } from "../auth/subjects.js";
import type { SessionStore, UserStore } from "../auth/types.js";
import type { Limiter } from "../ratelimit/limiter.js";

export type ApiStore = {
  kind: "redis" | "memory";
  users: UserStore;
  sessions: SessionStore;
  apiKeys: ApiKeyStore;
  subjects: SubjectStore;
  /** Failures and slow answers surface as StoreUnavailableError. */
  limiter: Limiter;
  /** Whether the store answers within `timeoutMs`. */
  ping(timeoutMs: number): Promise<boolean>;
};
