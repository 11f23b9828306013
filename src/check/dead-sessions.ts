// Sessions the store said are gone, so that their still-signed tokens are judged without it.
/**
 * A revoked or expired session never comes back (its hash is deleted; ids are random and never
 * reused), yet its token keeps a valid signature until it expires. Remembered
 * here, such a token is treated as an invalid one: counted against its client's address and
 * refused 401, as a flood of bad tokens is, instead of costing a session lookup every time.
 */
export type DeadSessions = {
  has(sessionId: string, nowMs: number): boolean;
  /** `untilMs`: the token's own expiry, past which its signature check refuses it anyway. */
  add(sessionId: string, untilMs: number): void;
};

export function createDeadSessions(options: { maxEntries: number }): DeadSessions {
  // Insertion order is age order: when full, the oldest entry makes room.
  const until = new Map<string, number>();
  return {
    has(sessionId, nowMs) {
      const end = until.get(sessionId);
      if (end === undefined) return false;
      if (end > nowMs) return true;
      until.delete(sessionId);
      return false;
    },
    add(sessionId, untilMs) {
      if (until.size >= options.maxEntries && !until.has(sessionId)) {
        const oldest = until.keys().next().value;
        if (oldest !== undefined) until.delete(oldest);
      }
      until.set(sessionId, untilMs);
    },
  };
}
