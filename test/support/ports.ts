// Free TCP ports on loopback for the servers that tests start (shared with the bench: local.mjs).
export { freePort, redisServerArgs, waitFor } from "./local.mjs";
