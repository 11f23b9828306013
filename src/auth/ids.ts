// Identifiers of users and sessions: random, URL-safe, and the same whichever store holds them.
import { randomBytes } from "node:crypto";

export const newUserId = (): string => `usr_${randomBytes(8).toString("hex")}`;

/**
 * 16 random bytes in base64url, never starting with `-`: a command line reads such an argument as
 * an option (`tollgate sessions revoke alice -Xb8…` failed as an unknown option for one session
 * in 64). Drawing again keeps every other id equally likely.
 */
export function newSessionId(): string {
  for (;;) {
    const id = randomBytes(16).toString("base64url");
    if (id.charCodeAt(0) !== 45) return id;
  }
}
