// API keys: `tg_<id>_<secret>`, the id public (it names the key's keys in the store), the secret 256
// random bits. Only the key's SHA-256 is stored: a fast hash is right for a key this random (nobody
// can guess 2^256 candidates, however fast each guess), where a password needs a slow one. Also
// what a key's name may hold.
import { createHash, randomBytes } from "node:crypto";
import { codePoint } from "./usernames.js";

const PREFIX = "tg_";
/** `tg_`, 16 hex digits of id, `_`, 43 base64url characters (32 bytes). */
const KEY = /^tg_([0-9a-f]{16})_[A-Za-z0-9_-]{43}$/;
/** Every key's length: what KEY matches. */
export const API_KEY_LENGTH = 3 + 16 + 1 + 43;
export const KEY_ID = /^[0-9a-f]{16}$/;

export const hashApiKey = (key: string): string => createHash("sha256").update(key).digest("base64url");

/** A new key, its id and hash: the key itself is shown once and never kept. */
export function newApiKey(): { id: string; key: string; hash: string } {
  const id = randomBytes(8).toString("hex");
  const key = `${PREFIX}${id}_${randomBytes(32).toString("base64url")}`;
  return { id, key, hash: hashApiKey(key) };
}

/** The key's id and hash, or undefined when `text` is not shaped like a key. */
export function readApiKey(text: string): { id: string; hash: string } | undefined {
  const match = KEY.exec(text);
  return match === null ? undefined : { id: match[1] as string, hash: hashApiKey(text) };
}

/**
 * The public id of a value shaped like an API key, without hashing it, or undefined: one length
 * check for most values. A rate limit service descriptor's value of this shape (its `x-api-key`,
 * say) is counted under the key's hash and shown by this id (rls/match.ts), never as itself.
 */
export function apiKeyIdOf(text: string): string | undefined {
  if (text.length !== API_KEY_LENGTH || !text.startsWith(PREFIX)) return undefined;
  return KEY.exec(text)?.[1];
}

/** The longest name of a key, once trimmed. */
export const MAX_KEY_NAME_LENGTH = 100;

/**
 * Characters no key name may hold: shown in a listing, a terminal or a log, they would garble or
 * forge what is around the name (a terminal escape, a line of its own, text running backwards).
 */
const REFUSED_IN_NAMES: readonly { pattern: RegExp; what: string }[] = [
  { pattern: /\p{Cc}/u, what: "control characters" },
  { pattern: /[\p{Zl}\p{Zp}]/u, what: "line or paragraph separators" },
  { pattern: /[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/u, what: "bidirectional text controls" },
  { pattern: /\p{Cs}/u, what: "half of a surrogate pair (not text)" },
];

/** Why a key's name (trimmed already) is refused, as a phrase to follow the field's name, or undefined. */
export function keyNameProblem(name: string): string | undefined {
  if (name.length === 0) return "must not be empty or only spaces";
  if (name.length > MAX_KEY_NAME_LENGTH) return `must be at most ${MAX_KEY_NAME_LENGTH} characters`;
  for (const { pattern, what } of REFUSED_IN_NAMES) {
    const found = pattern.exec(name);
    if (found !== null) {
      const at = [...name.slice(0, found.index)].length + 1;
      return `must not contain ${what} (${codePoint(found[0])} at character ${at})`;
    }
  }
  return undefined;
}
