// API keys: `tg_<id>_<secret>`, the id public (it names the key's keys in the store), the secret 256
// random bits. Only the key's SHA-256 is stored: a fast hash is right for a key this random (nobody
// can guess 2^256 candidates, however fast each guess), where a password needs a slow one.
import { createHash, randomBytes } from "node:crypto";

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
 * What a store key or a metric holds in place of a value that is an API key (a rate limit service
 * descriptor's `x-api-key`, say), never the key: `counted`, its hash, so that keys of one id with
 * other secrets count apart; `shown`, its public id. Undefined for any other value: one length
 * check for most.
 */
export function apiKeyStandIn(text: string): { counted: string; shown: string } | undefined {
  if (text.length !== API_KEY_LENGTH || !text.startsWith(PREFIX)) return undefined;
  const key = readApiKey(text);
  return key === undefined ? undefined : { counted: key.hash, shown: `${PREFIX}${key.id}` };
}
