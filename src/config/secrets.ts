// Secrets production refuses: every value published in this repository, and values too predictable to guess at.

/**
 * Every JWT_SECRET, ADMIN_TOKEN and METRICS_TOKEN value written anywhere in this repository (compose
 * defaults, benchmark, tests). Anyone can read them, so anyone could mint tokens or call the admin
 * API with them. test/unit/published-secrets.test.ts scans the repository and fails when a value
 * assigned to one of those names is missing here (unless it is refused as predictable anyway).
 */
export const PUBLISHED_SECRETS: ReadonlySet<string> = new Set([
  // docker-compose.yml (demo fallbacks)
  "demo-only-jwt-secret-do-not-use-in-production",
  "demo-only-admin-token-not-for-production",
  // bench/
  "bench-jwt-secret-0123456789-abcdefghijklmnop",
  "bench-admin-token-0123456789-abcdefghijklmnop",
  // test/
  "test-jwt-secret-0123456789-abcdefghij",
  "test-admin-token-0123456789-abcdefghij",
  "in-process-jwt-secret-0123456789-abcdef",
  "in-process-admin-token-0123456789-abcdef",
  "metrics-test-admin-token-0123456789",
  "metrics-test-scrape-token-0123456789",
  "prod-jwt-secret-ABCDEFGHIJKLMNOPQRSTUVWXYZ-0123",
  "prod-admin-token-ABCDEFGHIJKLMNOPQRSTUVWXYZ-0123",
  "prod-metrics-token-ABCDEFGHIJ-0123",
  "admin-token-from-the-env-file-0123456789",
]);

/** The shortest HS256 secret (JWT_SECRET, or the one kept in Redis), in bytes. */
export const MIN_SECRET_BYTES = 32;

/** Below this many bits of (empirical, per-byte) entropy a secret is refused as predictable. */
const MIN_ENTROPY_BITS = 80;
const MIN_DISTINCT_BYTES = 8;

function entropyBits(bytes: Buffer): number {
  const counts = new Map<number, number>();
  for (const b of bytes) counts.set(b, (counts.get(b) ?? 0) + 1);
  let perByte = 0;
  for (const count of counts.values()) {
    const p = count / bytes.length;
    perByte -= p * Math.log2(p);
  }
  return perByte * bytes.length;
}

/** Share of characters that repeat the one a period earlier, above which a value is a repeated run. */
const MAX_PERIODIC_SHARE = 0.8;

/**
 * True when the value is mostly a shorter run repeated ("abcabcabc…"), also with a character or a
 * few changed or added ("changeme-changeme-changeme-1"): an exact repetition is defeated by one more
 * character. Periods go up to half the length, so every share is taken over half the value or more:
 * random secrets stay far below the bound (a hex character repeats another by chance 1 time in 16).
 */
function periodic(value: string): boolean {
  for (let period = 1; period <= value.length / 2; period += 1) {
    let repeats = 0;
    for (let i = period; i < value.length; i += 1) if (value[i] === value[i - period]) repeats += 1;
    if (repeats >= MAX_PERIODIC_SHARE * (value.length - period)) return true;
  }
  return false;
}

/** Share of neighbouring characters that are equal or next to each other ("abcdef", "aaaa", "9876"). */
function sequentialShare(value: string): number {
  let sequential = 0;
  for (let i = 1; i < value.length; i += 1) {
    if (Math.abs(value.charCodeAt(i) - value.charCodeAt(i - 1)) <= 1) sequential += 1;
  }
  return value.length > 1 ? sequential / (value.length - 1) : 1;
}

/** Why production refuses this secret, or undefined when it may be used. Never includes the value. */
export function weakSecretReason(value: string): string | undefined {
  if (PUBLISHED_SECRETS.has(value)) {
    return "this value is published in tollgate's repository (a demo or test value); generate a new one, e.g. openssl rand -base64 48";
  }
  const bytes = Buffer.from(value, "utf8");
  if (
    new Set(bytes).size < MIN_DISTINCT_BYTES ||
    entropyBits(bytes) < MIN_ENTROPY_BITS ||
    periodic(value) ||
    // Above 3 in 4: random hex (16 symbols, about 1 in 5 neighbours within one) never gets there.
    sequentialShare(value) > 0.75
  ) {
    return "too predictable (repeated or sequential characters, too few distinct ones); generate one, e.g. openssl rand -base64 48";
  }
  return undefined;
}
