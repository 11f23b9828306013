// API keys and provider subjects' profiles on Redis: one hash each, under the subject's hash tag,
// read by the check's own script (lua/includes/profile.lua) in the same call as the limiter.
import type { ApiKey, ApiKeyStore, ProfilePatch, SubjectProfile, SubjectStore } from "../../auth/subjects.js";
import { keySubject } from "../../auth/subjects.js";
import type { RedisClient } from "./client.js";
import { ownLimits, windowsSpec } from "./codec.js";
import type { Keys } from "./keys.js";
import { scriptsOf } from "./loader.js";

/** The fields of a patch; an empty value removes the field. */
function patchFields(patch: ProfilePatch): string[] {
  const f: string[] = [];
  if (patch.tier !== undefined) f.push("tier", patch.tier ?? "");
  if (patch.blocked !== undefined) f.push("blocked", patch.blocked ? "1" : "");
  for (const [category, windows] of Object.entries(patch.limits ?? {})) {
    f.push(`o:${category}`, windows === null ? "" : windowsSpec(windows));
  }
  return f;
}

function toKey(id: string, f: Record<string, string>): ApiKey | undefined {
  if (f.h === undefined || f.tier === undefined) return undefined;
  return {
    id,
    name: f.name ?? "",
    tier: f.tier,
    userId: f.uid,
    createdAt: Number(f.created ?? 0),
    lastUsedAt: f.used === undefined ? undefined : Number(f.used),
    blocked: f.blocked === "1",
    limits: ownLimits(f),
  };
}

export function createRedisApiKeyStore(options: { redis: RedisClient; keys: Keys }): ApiKeyStore {
  const { redis, keys } = options;
  const scripts = scriptsOf(redis);
  const get = async (id: string) => toKey(id, await redis.hgetall(keys.apiKey(id)));
  return {
    async create(input) {
      const createdAt = Date.now();
      const fields: Record<string, string> = {
        h: input.hash,
        name: input.name,
        tier: input.tier,
        created: String(createdAt),
      };
      if (input.userId !== undefined) fields.uid = input.userId;
      // The key, then its id in the listing: an id listed without its key is then always a key
      // revoked for good (ids are never reused), which the listing may drop.
      await redis.hset(keys.apiKey(input.id), fields);
      try {
        await redis.zadd(keys.apiKeyIndex, 0, input.id);
      } catch (error) {
        // Unlisted, it could not be found to revoke. Its secret was never shown (the creation fails).
        await redis.del(keys.apiKey(input.id)).catch(() => undefined);
        throw error;
      }
      return { ...input, createdAt, lastUsedAt: undefined, blocked: false, limits: {} };
    },
    get,
    async list(limit, after) {
      const from = after === undefined ? "-" : `(${after}`;
      // One id more than the page: whether another page follows, whatever this one's ids still hold.
      const ids = await redis.zrangebylex(keys.apiKeyIndex, from, "+", "LIMIT", 0, limit + 1);
      const page = ids.slice(0, limit);
      // One command per key: each key's hash is in its own slot on Redis Cluster.
      const found = await Promise.all(page.map((id) => get(id)));
      // Ids whose key is gone (a revocation that failed after deleting the key, or one that ran
      // meanwhile): the key is revoked for good, so the id goes. Housekeeping: the next listing tries again.
      const gone = page.filter((_, i) => found[i] === undefined);
      if (gone.length > 0) await redis.zrem(keys.apiKeyIndex, ...gone).catch(() => undefined);
      return {
        keys: found.filter((k): k is ApiKey => k !== undefined),
        next: ids.length > limit ? page.at(-1) : undefined,
      };
    },
    async update(id, patch) {
      const changed = await scripts.call("profileUpdate", [keys.apiKey(id)], ["0", ...patchFields(patch)]);
      return changed === 1;
    },
    async remove(id) {
      // The hash first: from its deletion on no check accepts the key, whatever else fails.
      const removed = await redis.del(keys.record(keySubject(id)));
      await redis.zrem(keys.apiKeyIndex, id);
      return removed === 1;
    },
  };
}

export function createRedisSubjectStore(options: { redis: RedisClient; keys: Keys }): SubjectStore {
  const { redis, keys } = options;
  const scripts = scriptsOf(redis);
  return {
    async get(subject) {
      const f = await redis.hgetall(keys.profile(subject));
      if (Object.keys(f).length === 0) return undefined;
      const profile: SubjectProfile = { tier: f.tier, blocked: f.blocked === "1", limits: ownLimits(f) };
      return profile;
    },
    async update(subject, patch) {
      await scripts.call("profileUpdate", [keys.profile(subject)], ["1", ...patchFields(patch)]);
    },
  };
}
