// Redis key names. Every key of one subject shares a {hash tag}, so one script may touch them all.
import { canonicalUsername } from "../../auth/usernames.js";
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
  /**
   * The counter of the subject's `category` for the fixed window starting at `startMs`, as
   * envoyproxy/ratelimit keeps one (mode each): a string that INCRBY counts, expiring after its window.
   */
  window(subject: Subject, category: string, startMs: number): string;
  user(userId: string): string;
  /** An API key (`k:<id>` subject): its hash, name, tier, user, profile and counter states; deleted on revocation. */
  apiKey(keyId: string): string;
  /** Every API key id (sorted set, scores 0): the listing, without SCAN. */
  apiKeyIndex: string;
  /** A provider subject's profile (`x:<hash>` subject): what an admin set; absent otherwise. */
  profile(subject: Subject): string;
  session(userId: string, sessionId: string): string;
  sessionIndex(userId: string): string;
  /** A username's claim: keyed by its canonical form, so that every form of one name finds one user. */
  username(username: string): string;
  /** A deleted username that USERS_FILE must not bring back at the next start-up (canonical form too). */
  usernameGone(username: string): string;
  /** Where a tollgate before canonical usernames kept a name's claim and deletion: keyed as typed. */
  usernameAsTyped(username: string): string;
  usernameGoneAsTyped(username: string): string;
  /** Every user id (sorted set, all scores 0, read by lexical range): the listing, without SCAN. */
  userIndex: string;
  /** Set once any user exists. */
  usersMarker: string;
  /** The JWT secret generated outside production when JWT_SECRET is unset, shared by every instance. */
  jwtSecret: string;
  /** Set once the users of this store were given the canonical form of their names (adoptCanonicalNames). */
  namesMarker: string;
  /** The instances an announcement waits for (sorted set: id → when its listing ends), see invalidations.ts. */
  invalidationPeers: string;
  /** How many announcements were sent for the instances to acknowledge (announce-2.lua), in the same slot. */
  invalidationCount: string;
};

const hex = (text: string): string => Buffer.from(text, "utf8").toString("hex");

/**
 * Usernames are free text, so they are hex-encoded: no "{", "}" or ":" of theirs can break a tag.
 * User ids, session ids, categories and normalized IPs are validated to safe characters upstream.
 */
export function createKeys(prefix: string): Keys {
  return {
    log: (subject, category) => `${prefix}{${subject}}:l:${category}`,
    record: (subject) =>
      isUserSubject(subject)
        ? `${prefix}{${subject}}:user`
        : subject.startsWith("k:")
          ? `${prefix}{${subject}}:key`
          : `${prefix}{${subject}}:r`,
    window: (subject, category, startMs) => `${prefix}{${subject}}:w:${category}:${startMs}`,
    apiKey: (keyId) => `${prefix}{k:${keyId}}:key`,
    apiKeyIndex: `${prefix}{apikeys}:ids`,
    profile: (subject) => `${prefix}{${subject}}:p`,
    user: (userId) => `${prefix}{u:${userId}}:user`,
    session: (userId, sessionId) => `${prefix}{u:${userId}}:s:${sessionId}`,
    sessionIndex: (userId) => `${prefix}{u:${userId}}:sessions`,
    username: (username) => `${prefix}{n:${hex(canonicalUsername(username))}}:uid`,
    usernameGone: (username) => `${prefix}{n:${hex(canonicalUsername(username))}}:gone`,
    usernameAsTyped: (username) => `${prefix}{n:${hex(username)}}:uid`,
    usernameGoneAsTyped: (username) => `${prefix}{n:${hex(username)}}:gone`,
    userIndex: `${prefix}{users}:ids`,
    usersMarker: `${prefix}users:exist`,
    jwtSecret: `${prefix}jwt:secret`,
    namesMarker: `${prefix}users:names`,
    invalidationPeers: `${prefix}{invalidations}:peers`,
    invalidationCount: `${prefix}{invalidations}:peers:count`,
  };
}
