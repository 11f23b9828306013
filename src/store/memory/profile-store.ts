// API keys and provider subjects' profiles in process memory, with the Redis store's semantics;
// profileNow is what the memory limiter reads in the same step as its count.
import type { ApiKey, ApiKeyStore, ProfilePatch, Proof, SubjectStore } from "../../auth/subjects.js";
import type { Subject, Window } from "../../ratelimit/types.js";

type Profile = { tier: string | undefined; blocked: boolean; limits: Record<string, readonly Window[]> };
type StoredKey = ApiKey & { hash: string; limits: Record<string, readonly Window[]> };

export type ProfileTouch =
  | {
      kind: "ok";
      tier: string;
      limits: Readonly<Record<string, readonly Window[]>>;
      userId: string | undefined;
    }
  | { kind: "no_session" }
  | { kind: "user_inactive" };

export type MemoryProfiles = {
  apiKeys: ApiKeyStore;
  subjects: SubjectStore;
  /** A subject without a session as the check reads it (see lua/includes/profile.lua). */
  profileNow(subject: Subject, proof: Proof, dry: boolean): ProfileTouch;
};

function applyPatch(target: Profile, patch: ProfilePatch): void {
  if (patch.tier !== undefined) target.tier = patch.tier ?? undefined;
  if (patch.blocked !== undefined) target.blocked = patch.blocked;
  const limits = { ...target.limits };
  for (const [category, windows] of Object.entries(patch.limits ?? {})) {
    if (windows === null) delete limits[category];
    else limits[category] = windows.map((w) => ({ ...w }));
  }
  target.limits = limits;
}

const copyKey = ({ hash: _, ...key }: StoredKey): ApiKey => ({ ...key, limits: { ...key.limits } });

export function createMemoryProfiles(): MemoryProfiles {
  const keys = new Map<string, StoredKey>();
  const profiles = new Map<Subject, Profile>();

  const apiKeys: ApiKeyStore = {
    async create(input) {
      const key: StoredKey = {
        id: input.id,
        name: input.name,
        tier: input.tier,
        userId: input.userId,
        createdAt: Date.now(),
        lastUsedAt: undefined,
        blocked: false,
        limits: {},
        hash: input.hash,
      };
      keys.set(input.id, key);
      return copyKey(key);
    },
    async get(id) {
      const key = keys.get(id);
      return key === undefined ? undefined : copyKey(key);
    },
    async list(limit, after) {
      const ids = [...keys.keys()].filter((id) => after === undefined || id > after).sort();
      const page = ids.slice(0, limit);
      return {
        keys: page.map((id) => copyKey(keys.get(id) as StoredKey)),
        next: ids.length > limit ? page.at(-1) : undefined,
      };
    },
    async update(id, patch) {
      const key = keys.get(id);
      if (key === undefined) return false;
      const profile: Profile = { tier: key.tier, blocked: key.blocked, limits: key.limits };
      applyPatch(profile, patch);
      key.tier = profile.tier ?? key.tier;
      key.blocked = profile.blocked;
      key.limits = profile.limits;
      return true;
    },
    async remove(id) {
      return keys.delete(id);
    },
  };

  const subjects: SubjectStore = {
    async get(subject) {
      const p = profiles.get(subject);
      return p === undefined ? undefined : { ...p, limits: { ...p.limits } };
    },
    async update(subject, patch) {
      const p = profiles.get(subject) ?? { tier: undefined, blocked: false, limits: {} };
      applyPatch(p, patch);
      // Nothing set is nothing kept, as Redis drops an empty hash.
      if (p.tier === undefined && !p.blocked && Object.keys(p.limits).length === 0) profiles.delete(subject);
      else profiles.set(subject, p);
    },
  };

  const profileNow = (subject: Subject, proof: Proof, dry: boolean): ProfileTouch => {
    if (proof.kind === "key") {
      const key = keys.get(subject.slice(2));
      if (key === undefined || key.hash !== proof.hash) return { kind: "no_session" };
      if (key.blocked || (key.userId !== undefined && proof.refusedUsers?.has(key.userId) === true))
        return { kind: "user_inactive" };
      if (proof.markUsed && !dry) key.lastUsedAt = Date.now();
      return { kind: "ok", tier: key.tier, limits: key.limits, userId: key.userId };
    }
    const p = profiles.get(subject);
    if (p?.blocked === true) return { kind: "user_inactive" };
    return { kind: "ok", tier: p?.tier ?? proof.tier, limits: p?.limits ?? {}, userId: undefined };
  };

  return { apiKeys, subjects, profileNow };
}
