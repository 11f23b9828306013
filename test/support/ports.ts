// Free TCP ports on loopback for the servers that tests start (shared with the bench: local.mjs).
export { freePort, redisServerArgs, waitFor } from "./local.mjs";

/**
 * A new loopback source address per call, 127.0.<base>.1 upwards: each test file (or test) takes
 * clients of its own, since tollgate's per-IP limits key by them.
 */
export function loopbackAddresses(base: number): () => string {
  let count = 0;
  return () => {
    count += 1;
    return `127.0.${base + Math.floor(count / 250)}.${(count % 250) + 1}`;
  };
}
