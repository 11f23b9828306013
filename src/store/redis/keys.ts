// Redis key names. Every key of one subject shares a {hash tag}, so one script may touch them all.
import { isUserSubject, type Subject } from "../../ratelimit/types.js";

export type Keys = {
  /**
   * The sliding-log list of request times of the subject's `category`: every window of the rule
   * counts the entries inside its own span, so a window's count survives any change of the rule.
   */
  log(subject: Subject, category: string): string;
  /**
   * A subject's record hash, where counter and gcra states live (fields r:<category>): a user's is
   * the user hash; any other subject's is its own and expires when no state in it matters.
   */
  record(subject: Subject): string;
  user(userId: string): string;
  session(userId: string, sessionId: string): string;
  sessionIndex(userId: string): string;
  username(username: string): string;
  /** A deleted username that USERS_FILE must not bring back at the next start-up. */
  usernameGone(username: string): string;
  /** Every user id (sorted set, all scores 0, read by lexical range): the listing, without SCAN. */
  userIndex: string;
  /** Set once any user exists. */
  usersMarker: string;
  /** The JWT secret generated outside production when JWT_SECRET is unset, shared by every instance. */
  jwtSecret: string;
};

/**
 * Usernames are free text, so they are hex-encoded: no "{", "}" or ":" of theirs can break a tag.
 * User ids, session ids, categories and normalized IPs are validated to safe characters upstream.
 */
export function createKeys(prefix: string): Keys {
  return {
    log: (subject, category) => `${prefix}{${subject}}:l:${category}`,
    record: (subject) => (isUserSubject(subject) ? `${prefix}{${subject}}:user` : `${prefix}{${subject}}:r`),
    user: (userId) => `${prefix}{u:${userId}}:user`,
    session: (userId, sessionId) => `${prefix}{u:${userId}}:s:${sessionId}`,
    sessionIndex: (userId) => `${prefix}{u:${userId}}:sessions`,
    username: (username) => `${prefix}{n:${Buffer.from(username, "utf8").toString("hex")}}:uid`,
    usernameGone: (username) => `${prefix}{n:${Buffer.from(username, "utf8").toString("hex")}}:gone`,
    userIndex: `${prefix}{users}:ids`,
    usersMarker: `${prefix}users:exist`,
    jwtSecret: `${prefix}jwt:secret`,
  };
}
