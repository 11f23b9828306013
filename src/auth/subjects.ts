// Subjects without a tollgate session: a provider token's subject and an API key. Their profile
// (tier, block, own limits) is read in the check's one store call, as a session is for a user.
import type { Subject, Window } from "../ratelimit/types.js";

/** An API key's hash-tag content: `k:<key id>`. */
export const keySubject = (keyId: string): Subject => `k:${keyId}`;

/**
 * What the store checks instead of a session: an API key's hash (refused when it is not the
 * stored one, or the key is gone; `markUsed`: write its last use in the same call; `refusedUsers`:
 * refused as a blocked key is, before anything is counted, when it acts for one of them), or a
 * provider subject whose token was verified (`tier`: the token's, when the admin set none).
 */
export type Proof =
  | { kind: "key"; hash: string; markUsed: boolean; refusedUsers?: ReadonlySet<string> | undefined }
  | { kind: "subject"; tier: string };

/** An admin's settings for a subject without a session; fields left unset follow the defaults. */
export type SubjectProfile = {
  /** The tier set by an admin (over the token's). */
  tier: string | undefined;
  blocked: boolean;
  limits: Readonly<Record<string, readonly Window[]>>;
};

export type ProfilePatch = {
  /** null: the token's tier again. */
  tier?: string | null;
  blocked?: boolean;
  limits?: Readonly<Record<string, readonly Window[] | null>>;
};

export type ApiKey = {
  id: string;
  name: string;
  tier: string;
  /** The user the key acts for (x-user-id), when it was given one. */
  userId: string | undefined;
  createdAt: number;
  lastUsedAt: number | undefined;
  blocked: boolean;
  limits: Readonly<Record<string, readonly Window[]>>;
};

export type NewApiKey = { id: string; hash: string; name: string; tier: string; userId: string | undefined };

/**
 * A page of the key listing. `next` is the `after` of the next page, undefined on the last; it
 * comes from the ids read, so a page may hold fewer keys than asked (a key revoked meanwhile), even
 * none, and still have one after it.
 */
export type ApiKeyPage = { keys: ApiKey[]; next: string | undefined };

/** API keys: stored by id with the SHA-256 of the key, never the key itself. */
export type ApiKeyStore = {
  create(key: NewApiKey): Promise<ApiKey>;
  get(id: string): Promise<ApiKey | undefined>;
  /** Keys in id order, at most `limit`, those after the id `after` when it is given (paging). */
  list(limit: number, after?: string): Promise<ApiKeyPage>;
  /** Changes a key that exists; false when it does not. */
  update(id: string, patch: Omit<ProfilePatch, "tier"> & { tier?: string }): Promise<boolean>;
  /** Deletes the key: from the answer on, no check accepts it. */
  remove(id: string): Promise<boolean>;
};

/** Provider subjects' profiles, by subject (externalSubject). */
export type SubjectStore = {
  get(subject: Subject): Promise<SubjectProfile | undefined>;
  update(subject: Subject, patch: ProfilePatch): Promise<void>;
};
