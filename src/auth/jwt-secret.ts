// Outside production with Redis and no JWT_SECRET: the secret is generated once and kept in Redis,
// so that tokens outlive a restart, as the users and sessions they stand for do, and every instance
// on the same Redis and REDIS_KEY_PREFIX accepts the tokens of the others.
import type { Config } from "../config/env.js";
import { MIN_SECRET_BYTES, weakSecretReason } from "../config/secrets.js";
import type { Logger } from "../process/logger.js";
import { storeTimeouts } from "../store/failure.js";

/** What the secret needs of the store (the Store of store/store.ts). */
export type SecretStore = {
  kind: "redis" | "memory";
  connected(timeoutMs: number): Promise<boolean>;
  refusedSetting(): string | undefined;
  sharedJwtSecret(candidate: string): Promise<string>;
};

/**
 * How long start-up waits for the store to give the secret. Nothing listens meanwhile, so a longer
 * wait would look like a hang; a supervisor (compose, Kubernetes) restarts a process that gives up.
 */
export const SHARED_SECRET_WAIT_MS = 5_000;
const MAX_RETRY_DELAY_MS = 1_000;

/**
 * Why the secret kept in Redis may not sign tokens, or undefined. tollgate stores only secrets it
 * generated: anything shorter or predictable was written there by someone else (or by hand).
 */
function keptSecretProblem(secret: string): string | undefined {
  if (Buffer.byteLength(secret, "utf8") < MIN_SECRET_BYTES) return `shorter than ${MIN_SECRET_BYTES} bytes`;
  return weakSecretReason(secret);
}

type SharedSecretOptions = {
  config: Config;
  store: SecretStore;
  logger: Logger;
  fail: (problems: string[]) => never;
  /** How long to wait for the store (default SHARED_SECRET_WAIT_MS). */
  waitMs?: number;
};

/**
 * The settings with the JWT secret every instance uses: `config` itself when JWT_SECRET is set or
 * the store is the memory one. Otherwise waits for the store (nothing can sign or verify a token
 * before the secret is known) for at most `waitMs`, and stops start-up through `fail` when it does
 * not answer by then, on a setting the store refuses, and on a kept secret too weak to sign with.
 */
export async function withSharedJwtSecret(options: SharedSecretOptions): Promise<Config> {
  const { config, store, logger, fail } = options;
  const candidate = config.jwt.secret;
  if (!config.jwt.secretGenerated || candidate === undefined || store.kind === "memory") return config;
  const key = `${config.redisKeyPrefix}jwt:secret`;
  const secret = await keptSecret(options, candidate, key);
  const problem = keptSecretProblem(secret);
  if (problem !== undefined) {
    fail([
      `the JWT secret kept in Redis (${key}) is refused: ${problem}. tollgate never stores such a value: set JWT_SECRET (at least ${MIN_SECRET_BYTES} bytes), or delete ${key} and restart every tollgate on this REDIS_KEY_PREFIX so that they share a new one`,
    ]);
  }
  logger.info(
    { event: "jwt_secret_shared", generatedHere: secret === candidate },
    `JWT_SECRET is unset: tokens are signed with a secret generated once and kept in Redis (${key}), shared by every tollgate with this REDIS_KEY_PREFIX and kept across restarts; production requires JWT_SECRET`,
  );
  return { ...config, jwt: { ...config.jwt, secret } };
}

/** The secret kept at `key` (`candidate` when none was yet), retried until the wait is over. */
async function keptSecret(options: SharedSecretOptions, candidate: string, key: string): Promise<string> {
  const { config, store, logger, fail } = options;
  const waitMs = options.waitMs ?? SHARED_SECRET_WAIT_MS;
  const deadline = Date.now() + waitMs;
  await store.connected(Math.min(waitMs, storeTimeouts(config.redisTimeoutMs).connectMs));
  for (let attempt = 1; ; attempt += 1) {
    const refused = store.refusedSetting();
    if (refused !== undefined) fail([refused]);
    try {
      return await store.sharedJwtSecret(candidate);
    } catch (error) {
      const reason = (error as Error).message;
      if (Date.now() + retryDelay(attempt) >= deadline) {
        fail([
          `the store is unreachable (${reason}) and JWT_SECRET is unset: the JWT secret kept in Redis (${key}) is needed before tollgate listens, and Redis did not answer within ${waitMs / 1000} s. Start Redis, or set JWT_SECRET (then tollgate starts without Redis, and checks follow FAILURE_MODE until it answers)`,
        ]);
      }
      if (attempt === 1)
        logger.warn(
          { event: "store_down", err: reason },
          `store unreachable at start-up; retrying for up to ${waitMs / 1000} s (the JWT secret kept there is needed before listening)`,
        );
      await new Promise((r) => setTimeout(r, retryDelay(attempt)));
    }
  }
}

const retryDelay = (attempt: number): number => Math.min(MAX_RETRY_DELAY_MS, 200 * attempt);
