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
      // In the listing first, so that no key exists that the listing misses (it skips ids without a hash).
      await redis.zadd(keys.apiKeyIndex, 0, input.id);
      const fields: Record<string, string> = {
        h: input.hash,
        name: input.name,
        tier: input.tier,
        created: String(createdAt),
      };
      if (input.userId !== undefined) fields.uid = input.userId;
      await redis.hset(keys.apiKey(input.id), fields);
      return { ...input, createdAt, lastUsedAt: undefined, blocked: false, limits: {} };
    },
    get,
    async list(limit, after) {
      const from = after === undefined ? "-" : `(${after}`;
      const ids = await redis.zrangebylex(keys.apiKeyIndex, from, "+", "LIMIT", 0, limit);
      // One command per key: each key's hash is in its own slot on Redis Cluster.
      const found = await Promise.all(ids.map((id) => get(id)));
      return found.filter((k): k is ApiKey => k !== undefined);
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
