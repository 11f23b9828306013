// Salted scrypt password hashes: "scrypt$N$r$p$salt$hash", compared in constant time.
import { randomBytes, scrypt, timingSafeEqual } from "node:crypto";

const N = 16_384;
const R = 8;
const P = 1;
const KEY_LENGTH = 32;
const SALT_LENGTH = 16;

function derive(password: string, salt: Buffer, n: number, r: number, p: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    scrypt(password, salt, KEY_LENGTH, { N: n, r, p, maxmem: 256 * n * r }, (error, key) =>
      error ? reject(error) : resolve(key),
    );
  });
}

export async function hashPassword(password: string): Promise<string> {
  const salt = randomBytes(SALT_LENGTH);
  const key = await derive(password, salt, N, R, P);
  return `scrypt$${N}$${R}$${P}$${salt.toString("base64url")}$${key.toString("base64url")}`;
}

/** base64url's length of `bytes` bytes, unpadded. */
const base64Length = (bytes: number): number => Math.ceil((bytes * 4) / 3);

/**
 * Only what hashPassword writes: its parameters, salt and key length. A USERS_FILE hash made with
 * others would cost its user's logins another amount of work than an unknown name's decoy (which
 * tells that the name exists), a large N seconds of CPU and gigabytes of memory per guess, and
 * parameters scrypt refuses an error on every login; another key length never verifies.
 */
const PATTERN = new RegExp(
  `^scrypt\\$(${N})\\$(${R})\\$(${P})\\$([A-Za-z0-9_-]{${base64Length(SALT_LENGTH)}})\\$([A-Za-z0-9_-]{${base64Length(KEY_LENGTH)}})$`,
);

export function isPasswordHash(value: string): boolean {
  return PATTERN.test(value);
}

/** A hash of no one's password: unknown users cost the same work as a wrong password. */
const DECOY = `scrypt$${N}$${R}$${P}$${randomBytes(SALT_LENGTH).toString("base64url")}$${randomBytes(KEY_LENGTH).toString("base64url")}`;

/**
 * Checks a password; with no hash (unknown user), or one hashPassword would not write, it does the
 * same work and answers false.
 */
export async function verifyPassword(password: string, hash: string | undefined): Promise<boolean> {
  const match = PATTERN.exec(hash ?? DECOY) ?? (PATTERN.exec(DECOY) as RegExpExecArray);
  const [, n, r, p, salt, expected] = match as unknown as [string, string, string, string, string, string];
  const key = await derive(password, Buffer.from(salt, "base64url"), Number(n), Number(r), Number(p));
  const wanted = Buffer.from(expected, "base64url");
  return hash !== undefined && wanted.length === key.length && timingSafeEqual(wanted, key);
}
