// Outside production with Redis and no JWT_SECRET: the secret is generated once and kept in Redis,
// so that tokens outlive a restart, as the users and sessions they stand for do, and every instance
// on the same Redis and REDIS_KEY_PREFIX accepts the tokens of the others.
import type { Config } from "./config/env.js";
import type { Logger } from "./logger.js";
import { type Store, storeTimeouts } from "./store/store.js";

/**
 * The settings with the JWT secret every instance uses: `config` itself when JWT_SECRET is set or
 * the store is the memory one. Otherwise waits for the store (nothing can sign or verify a token
 * before the secret is known), and stops start-up through `fail` on a setting the store refuses.
 */
export async function withSharedJwtSecret(options: {
  config: Config;
  store: Store;
  logger: Logger;
  fail: (problems: string[]) => never;
}): Promise<Config> {
  const { config, store, logger } = options;
  const candidate = config.jwt.secret;
  if (!config.jwt.secretGenerated || candidate === undefined || store.kind === "memory") return config;
  await store.connected(storeTimeouts(config.redisTimeoutMs).connectMs);
  for (let attempt = 1; ; attempt += 1) {
    const refused = store.refusedSetting();
    if (refused !== undefined) options.fail([refused]);
    try {
      const secret = await store.sharedJwtSecret(candidate);
      logger.info(
        { event: "jwt_secret_shared", generatedHere: secret === candidate },
        `JWT_SECRET is unset: tokens are signed with a secret generated once and kept in Redis (${config.redisKeyPrefix}jwt:secret), shared by every tollgate with this REDIS_KEY_PREFIX and kept across restarts; production requires JWT_SECRET`,
      );
      return { ...config, jwt: { ...config.jwt, secret } };
    } catch (error) {
      if (attempt === 1)
        logger.warn(
          { event: "store_down", err: (error as Error).message },
          "store unreachable at start-up; retrying (the JWT secret kept there is needed before listening)",
        );
      await new Promise((r) => setTimeout(r, Math.min(5_000, 200 * attempt)));
    }
  }
}
